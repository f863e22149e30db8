#!/bin/bash
# Runs bad inputs of the corpus (tests/corpus/make_bad_inputs.py) under `mpiexec -np 2` and
# requires of each: exit code 1 (not 0, not a signal, not a usage error), every expected
# substring in the output, exactly one "error:" line, no target folder and no staging folder.
# usage: run_corpus.sh VMERGE MPIEXEC CORPUS_DIR [CASE...]   (no CASE: every case)
set -uo pipefail
vmerge=$1 mpiexec=$2 corpus=$3
shift 3
python=${VMERGE_TEST_PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work="$corpus/.runs"
mkdir -p "$work"

cases=("$@")
if [[ ${#cases[@]} -eq 0 ]]; then
    mapfile -t cases < <("$python" -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))))' \
                         "$corpus/corpus.json")
fi

failures=0
for name in "${cases[@]}"; do
    # local_dir, args and the expected substrings, one per line after the args count.
    mapfile -t spec < <("$python" - "$corpus/corpus.json" "$name" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))[sys.argv[2]]
print(c["local_dir"]); print(len(c["args"]))
for a in c["args"]: print(a)
for e in c["error"]: print(e)
PY
)
    if [[ ${#spec[@]} -lt 3 ]]; then
        echo "FAIL $name: not in $corpus/corpus.json"; failures=$((failures + 1)); continue
    fi
    local_dir=${spec[0]} nargs=${spec[1]}
    args=("${spec[@]:2:nargs}")
    expected=("${spec[@]:$((2 + nargs))}")
    target="$work/out.$name"
    log="$work/$name.log"
    rm -rf "$target" "$work/.out.$name.vmerge-staging"*
    timeout 300 "$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$local_dir" \
        --target_dir "$target" "${args[@]}" >"$log" 2>&1
    rc=$?
    problem=""
    if [[ $rc -ne 1 ]]; then
        problem="exit code $rc, expected 1"
    elif [[ $(grep -c "error:" "$log") -ne 1 ]]; then
        problem="$(grep -c "error:" "$log") 'error:' lines, expected exactly one"
    elif [[ -e $target ]]; then
        problem="left the target folder $target"
    elif compgen -G "$work/.out.$name.vmerge-staging*" >/dev/null; then
        problem="left a staging folder"
    else
        for text in "${expected[@]}"; do
            if ! grep -qF -- "$text" "$log"; then problem="the message lacks '$text'"; break; fi
        done
    fi
    if [[ -n $problem ]]; then
        echo "FAIL $name: $problem"
        sed 's/^/    /' "$log"
        failures=$((failures + 1))
    else
        echo "ok   $name: $(grep -m1 "error:" "$log")"
        rm -f "$log"
        rm -rf "$target"
    fi
done
if [[ $failures -ne 0 ]]; then
    echo "$failures of ${#cases[@]} bad input(s) misbehaved"
    exit 1
fi
echo "all ${#cases[@]} bad input(s) failed as expected"
