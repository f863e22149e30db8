# Sourced by the case scripts. expect_failed_merge TARGET EXPECTED COMMAND...: COMMAND (a merge
# into TARGET) must exit non-zero, print EXPECTED, and leave neither TARGET nor its staging
# folder behind.
expect_failed_merge() {
    local target=$1 expected=$2
    shift 2
    local rc=0
    "$@" >"$target.log" 2>&1 || rc=$?
    cat "$target.log"
    [[ $rc -ne 0 ]] || { echo "FAIL: exit 0, expected an error naming '$expected'"; exit 1; }
    grep -qF -- "$expected" "$target.log" || { echo "FAIL: the message does not name '$expected'"; exit 1; }
    [[ ! -e $target ]] || { echo "FAIL: left $target behind"; exit 1; }
    local staging
    staging="$(dirname "$target")/.$(basename "$target").vmerge-staging"
    ! compgen -G "$staging*" >/dev/null || { echo "FAIL: left a staging folder"; exit 1; }
    rm -f "$target.log"
}
