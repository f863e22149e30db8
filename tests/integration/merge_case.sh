#!/bin/bash
# Merges one generated fixture case with N ranks and checks the result three ways:
# the independent Python checker (safetensors rules + bit-for-bit against the reference),
# vmerge's own `test` against the reference, and `verify` on the written folder.
# usage: merge_case.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES CASE NP WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 case=$6 np=$7 work=$8

args=$("$python" -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))[sys.argv[2]]['merge_args']))" \
    "$fixtures/cases.json" "$case")
reference="$fixtures/$case.reference"
target="$work/$case.np$np"
rm -rf "$target"
mkdir -p "$work"
launch=("$mpiexec" --oversubscribe -np "$np")

# shellcheck disable=SC2086
"${launch[@]}" "$vmerge" merge --backend fsdp --local_dir "$fixtures/$case" --target_dir "$target" $args \
    --max-shard-size 40KB
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target" --ref "$reference" \
    --hf "$fixtures/$case/huggingface"
# shellcheck disable=SC2086
"${launch[@]}" "$vmerge" test --local_dir "$fixtures/$case" --test_hf_dir "$reference" $args
"${launch[@]}" "$vmerge" verify --target_dir "$target"
# A one-file merge too: the default shard size keeps these models in model.safetensors.
rm -rf "$target.single"
# shellcheck disable=SC2086
"${launch[@]}" "$vmerge" merge --local_dir "$fixtures/$case" --target_dir "$target.single" $args --quiet
test -f "$target.single/model.safetensors"
test ! -e "$target.single/model.safetensors.index.json"
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target.single" --ref "$reference"
rm -rf "$target" "$target.single"
