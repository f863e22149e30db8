#!/bin/bash
# The shipped example checkpoint merges (1 and 2 ranks) into its committed reference.
# usage: example_merge.sh VMERGE MPIEXEC PYTHON SOURCE_DIR WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 work=$5
example="$source_dir/examples/tiny-qwen2-fsdp/global_step_1"
rm -rf "$work"
mkdir -p "$work"
"$vmerge" merge --local_dir "$example/actor" --target_dir "$work/np1"
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$work/np1" --ref "$example/reference" \
    --hf "$example/actor/huggingface"
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$example/actor" --target_dir "$work/np2" \
    --max-shard-size 1MB
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$work/np2" --ref "$example/reference"
rm -rf "$work"
