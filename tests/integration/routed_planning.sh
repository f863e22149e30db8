#!/bin/bash
# The routed planning of verl FSDP / FSDP2 merges (docs/scaling.md, "Routed planning"): where it
# applies every rank says so in --log_json and receives fewer scanned entries than the all-gather
# delivers, and the output is byte-identical to the all-gather planning's
# (VMERGE_TEST_ALLGATHER_PLANNING); where it does not (replicas, plain tensors, a tied head, a
# broken save), every rank plans from the all-gather and the error is the one it gives.
# usage: routed_planning.sh VMERGE MPIEXEC FIXTURES TORCH2_FIXTURES NP WORK
set -uo pipefail
vmerge=$1 mpiexec=$2 fixtures=$3 torch2=$4 np=$5 work=$6
rm -rf "$work"
mkdir -p "$work"
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# merge NAME MODE LOCAL_DIR [ARGS...]: MODE routed (the default planning) or allgather.
merge() {
    local name=$1 mode=$2 local_dir=$3
    shift 3
    local env=()
    [[ $mode == allgather ]] && env=(env VMERGE_TEST_ALLGATHER_PLANNING=1)
    "${env[@]}" "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$local_dir" \
        --target_dir "$work/$name.$mode" --quiet --log_json "$work/$name.$mode.json" "$@" >"$work/$name.$mode.log" 2>&1
}

# planning NAME MODE: "PLANNINGS ENTRIES..." from the per-rank records of --log_json.
planning() {
    python3 - "$work/$1.$2.json" <<'PY'
import json, sys
ranks = json.load(open(sys.argv[1]))["per_rank"]
print(",".join(sorted({r["planning"] for r in ranks})), *[r["entries_received"] for r in ranks])
PY
}

# A routable save: routed on every rank, each receiving fewer entries than the all-gather
# gives every rank (with more than one rank), and the same bytes as the all-gather planning.
routed_case() {  # name local_dir [args...]
    local name=$1 local_dir=$2
    shift 2
    merge "$name" routed "$local_dir" "$@" || { fail "$name: routed merge failed"; cat "$work/$name.routed.log"; return; }
    merge "$name" allgather "$local_dir" "$@" || { fail "$name: all-gather merge failed"; return; }
    read -r routed_plan routed_entries <<<"$(planning "$name" routed)"
    read -r gathered_plan gathered_entries <<<"$(planning "$name" allgather)"
    [[ $routed_plan == routed ]] || fail "$name: planned '$routed_plan', not routed"
    [[ $gathered_plan == all-gather ]] || fail "$name: VMERGE_TEST_ALLGATHER_PLANNING planned '$gathered_plan'"
    local all=${gathered_entries%% *}
    if [[ $np -gt 1 ]]; then
        for n in $routed_entries; do
            [[ $n -lt $all ]] || fail "$name: a rank received $n of $all entries"
        done
    fi
    diff -r "$work/$name.routed" "$work/$name.allgather" >/dev/null || fail "$name: outputs differ"
    echo "ok   $name: routed, entries per rank $routed_entries (all-gather: $all each), output identical"
}

# A save the routed planning leaves to the all-gather: every rank says so.
allgather_case() {  # name local_dir [args...]
    local name=$1 local_dir=$2
    shift 2
    merge "$name" routed "$local_dir" "$@" || { fail "$name: merge failed"; cat "$work/$name.routed.log"; return; }
    read -r plan _ <<<"$(planning "$name" routed)"
    [[ $plan == all-gather ]] || fail "$name: planned '$plan', not all-gather"
    echo "ok   $name: all-gather"
}

# A broken save: both plannings fail with the same message.
same_error_case() {  # name expected local_dir
    local name=$1 expected=$2 local_dir=$3
    merge "$name" routed "$local_dir" && { fail "$name: exit 0"; return; }
    merge "$name" allgather "$local_dir" && { fail "$name: all-gather exit 0"; return; }
    grep -qF -- "$expected" "$work/$name.routed.log" ||
        { fail "$name: no '$expected':"; cat "$work/$name.routed.log"; return; }
    diff <(grep error "$work/$name.routed.log") <(grep error "$work/$name.allgather.log") >/dev/null ||
        { fail "$name: the messages differ"; return; }
    echo "ok   $name: $(grep -m1 error "$work/$name.routed.log")"
}

routed_case w3_uneven "$fixtures/w3_uneven"
routed_case w8_empty "$fixtures/w8_empty"
routed_case noncontig_w2 "$fixtures/noncontig_w2" --max-shard-size 8KB
routed_case fsdp2_w3 "$torch2/fsdp2_w3"
allgather_case hsdp_2x2 "$fixtures/hsdp_2x2"
allgather_case fsdp_tp_2x2 "$fixtures/fsdp_tp_2x2"
allgather_case plain_w2 "$fixtures/plain_w2"
allgather_case tied_w2 "$fixtures/tied_w2"

# Rank 1 of another save: a key missing, a key more, another global shape.
broken_case() {  # name expected rank-0-save rank-1-save
    mkdir -p "$work/$1"
    cp -r "$fixtures/$3/." "$work/$1/"
    cp "$fixtures/$4/model_world_size_2_rank_1.pt" "$work/$1/"
    same_error_case "$1" "$2" "$work/$1"
}
broken_case missing_key "is missing" w2_bf16 tied_w2
broken_case extra_key "is not in" keep_fp32_w2 w2_bf16
broken_case global_shape "global shape [63, 32] differs" keep_fp32_w2 torch24_w2

# A share whose planning metadata exceeds --max-memory: every rank stops before anything is
# written, saying how many ranks would fit.
merge budget routed "$fixtures/w8_empty" --max-memory 12KiB && fail "budget: exit 0"
if ! grep -q "'planning budget'.* ranks would fit" "$work/budget.routed.log"; then
    fail "budget: no 'ranks would fit':"; cat "$work/budget.routed.log"
elif [[ -e $work/budget.routed ]] || compgen -G "$work/.budget.routed.vmerge-staging*" >/dev/null; then
    fail "budget: left its target or staging folder"
else
    echo "ok   budget: $(grep -m1 error "$work/budget.routed.log")"
fi

if [[ $failures -ne 0 ]]; then
    echo "$failures routed planning check(s) failed"
    exit 1
fi
rm -rf "$work"
echo "routed planning: all checks passed"
