#!/bin/bash
# Every torchtitan fixture case (make_torchtitan_fixtures.py) in one process: a merge case is
# merged with 1, 2 and 3 ranks and compared bit for bit with its reference (vmerge's `test` at
# each rank count; one written merge per case also through the independent checker, and
# `verify` once); a failure case must exit 1 with its message and leave nothing behind.
# usage: torchtitan_cases.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 work=$6
source "$source_dir/tests/integration/expect_failed_merge.sh"
rm -rf "$work"
mkdir -p "$work"
cases=$("$python" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$fixtures/cases.json")
for case in $cases; do
    eval "$("$python" "$source_dir/tests/integration/case_fields.py" "$fixtures/cases.json" "$case")"
    local_dir="$fixtures/$local_dir"
    args=("${merge_args[@]}" --hf_config "$fixtures/$hf_config")
    target="$work/$case"
    echo "== $case"
    if [[ -n $expected_error ]]; then
        expect_failed_merge "$target" "$expected_error" \
            "$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" "${args[@]}"
        continue
    fi
    for np in 1 2 3; do
        "$mpiexec" --oversubscribe -np "$np" "$vmerge" test --local_dir "$local_dir" \
            --test_hf_dir "$fixtures/$reference" "${args[@]}" --quiet
    done
    "$mpiexec" --oversubscribe -np 3 "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" "${args[@]}" \
        --max-shard-size 40KB --quiet
    "$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target" --ref "$fixtures/$reference"
    [[ $case != tt_llama3_last ]] || "$mpiexec" --oversubscribe -np 2 "$vmerge" verify --target_dir "$target"
    rm -rf "$target"
done
# inspect --json names the table and the rules it applied (the RoPE permutation among them).
"$vmerge" inspect --local_dir "$fixtures/llama3/outputs" --hf_config "$fixtures/llama3/hf" --json >"$work/inspect.json"
"$python" - "$work/inspect.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j["architecture_table"]
assert t["name"] == "torchtitan llama3", t
kinds = {r.get("transform", "none") for r in t["rules_applied"]}
assert kinds == {"none", "rope_permute"}, kinds
assert j["backend"] == "torchtitan", j["backend"]
print("inspect --json: %d rules applied from %s" % (len(t["rules_applied"]), t["file"]))
PY
# A Megatron merge prints its table too: the user's, with the split and TP rule of each rule applied.
"$vmerge" inspect --local_dir "$fixtures/mg_user_table/actor" --json \
    --architecture_table "$fixtures/mg_user_table/my_megatron_llama.json" >"$work/inspect_megatron.json"
"$python" - "$work/inspect_megatron.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j["architecture_table"]
assert t["name"] == "my megatron llama (user table)" and t["source"] == "megatron", t
qkv = [r for r in t["rules_applied"] if r["from"].endswith("linear_qkv.weight")]
assert qkv and qkv[0]["split"] == "qkv" and qkv[0]["tp"] == "dim0" and len(qkv[0]["to"]) == 3, qkv
assert qkv[0]["tensors"] == 2, qkv
print("inspect --json (megatron): %d rules applied from %s" % (len(t["rules_applied"]), t["file"]))
PY
echo "torchtitan cases: ok"
