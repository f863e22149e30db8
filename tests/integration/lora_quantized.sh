#!/bin/bash
# A LoRA merge that is also quantized: the adapter is folded in first, and the quantized
# weights must be the RTN of the merged reference (check_quantized.py recomputes it).
# Group 16 runs on no vLLM kernel, so it needs --allow_unsupported_quantization; it is kept
# because it makes several groups per row of these tiny weights.
# usage: lora_quantized.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 work=$6
rm -rf "$work" && mkdir -p "$work"
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge -q --local_dir "$fixtures/lora_w2_rslora_bf16/global_step_1/actor" \
    --target_dir "$work/q4" --merge_lora --quantize --bits 4 --group_size 16 --asymmetric --max-memory 1MiB \
    --allow_unsupported_quantization
"$python" "$source_dir/tests/tools/check_quantized.py" --out "$work/q4" --ref "$fixtures/lora_w2_rslora_bf16.merged" \
    --bits 4 --group 16 --asymmetric
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge -q --local_dir "$fixtures/lora_w3_uneven/global_step_1/actor" \
    --target_dir "$work/q8" --merge_lora --quantize --bits 8 --group_size 0
"$python" "$source_dir/tests/tools/check_quantized.py" --out "$work/q8" --ref "$fixtures/lora_w3_uneven.merged" --bits 8 --group 0
