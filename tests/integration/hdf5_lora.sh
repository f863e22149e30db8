#!/bin/bash
# A checkpoint with a LoRA adapter and --format hdf5: refused unless --merge_lora (an archive holds
# one model, no lora_adapter/ folder); with --merge_lora the archive, turned back into an HF folder,
# is byte-identical to the safetensors --merge_lora merge.
# usage: hdf5_lora.sh VMERGE MPIEXEC LORA_FIXTURES NP WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 fixtures=$3 np=$4 work=$5
ckpt="$fixtures/lora_w3_uneven/global_step_1/actor"
launch=("$mpiexec" --oversubscribe -np "$np")
rm -rf "$work"
mkdir -p "$work"
if "${launch[@]}" "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/extract" --format hdf5 >"$work/log" 2>&1; then
    echo "FAIL: --format hdf5 accepted an adapter to extract"; exit 1
fi
grep -qF "holds a LoRA adapter: --format hdf5 writes no lora_adapter/ folder" "$work/log" || { cat "$work/log"; exit 1; }
[[ ! -e $work/extract ]] || { echo "FAIL: left $work/extract"; exit 1; }
"${launch[@]}" "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/archive" --format hdf5 --compress zstd \
    --merge_lora --hdf5_chunk_size 1KB -q
"${launch[@]}" "$vmerge" merge --backend hdf5 --local_dir "$work/archive" --target_dir "$work/hf" -q
"${launch[@]}" "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/st" --merge_lora -q
cmp "$work/st/model.safetensors" "$work/hf/model.safetensors"
rm -rf "$work"
