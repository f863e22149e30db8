#!/bin/bash
# Merges one generated fixture case with N ranks and checks the result three ways:
# the independent Python checker (safetensors rules + bit-for-bit against the reference),
# vmerge's own `test` against the reference, and `verify` on the written folder.
# A case whose cases.json entry expects an error must fail with that text and leave nothing.
# usage: merge_case.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES CASE NP WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 case=$6 np=$7 work=$8

# cases.json (FSDP and Megatron generators): local_dir, hf_config, reference, merge_args, expect.
eval "$("$python" "$source_dir/tests/integration/case_fields.py" "$fixtures/cases.json" "$case")"
local_dir="$fixtures/$local_dir"
args=("${merge_args[@]}")
hf_dir="$local_dir/huggingface"
if [[ -n $hf_config ]]; then
    args+=(--hf_config "$fixtures/$hf_config")
    hf_dir="$fixtures/$hf_config"
fi
target="$work/$case.np$np"
rm -rf "$target" "$target.single"
mkdir -p "$work"
launch=("$mpiexec" --oversubscribe -np "$np")

if [[ -n $expected_error ]]; then
    source "$source_dir/tests/integration/expect_failed_merge.sh"
    expect_failed_merge "$target" "$expected_error" \
        "${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" "${args[@]}"
    exit 0
fi

reference="$fixtures/$reference"
"${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" "${args[@]}" --max-shard-size 40KB
hf_check=()
[[ -d $hf_dir ]] && hf_check=(--hf "$hf_dir")
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target" --ref "$reference" "${hf_check[@]}"
"${launch[@]}" "$vmerge" test --local_dir "$local_dir" --test_hf_dir "$reference" "${args[@]}"
"${launch[@]}" "$vmerge" verify --target_dir "$target"
# A one-file merge too: the default shard size keeps these models in model.safetensors.
"${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target.single" "${args[@]}" --quiet
test -f "$target.single/model.safetensors"
test ! -e "$target.single/model.safetensors.index.json"
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target.single" --ref "$reference"
rm -rf "$target" "$target.single"
