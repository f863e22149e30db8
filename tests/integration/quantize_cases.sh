#!/bin/bash
# `merge --quantize` writes compressed-tensors pack-quantized weights that an independent checker
# (tests/tools/check_quantized.py, written from docs/reference/output-formats.md §3) recomputes
# exactly from an unquantized merge of the same checkpoint; `verify` accepts each quantized folder.
# With MEGATRON_FIXTURES, a Megatron MoE checkpoint too (experts quantized, router gates and
# the shared-expert gate left as they are and listed in `ignore`).
# usage: quantize_cases.sh VMERGE MPIEXEC PYTHON SOURCE_DIR WORK [MEGATRON_FIXTURES]
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 work=$5 megatron_fixtures=${6:-}
actor="$source_dir/examples/tiny-qwen2-fsdp/global_step_1/actor"  # H=128, I=344, bf16
checker="$source_dir/tests/tools/check_quantized.py"
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"

# One quantized merge checked three ways. usage: check_case LABEL ACTOR REF NP "BITS GROUP sym|asym"
check_case() {
    local label=$1 actor=$2 ref=$3 np=$4 bits group mode
    read -r bits group mode <<<"$5"
    local asym=()
    [[ $mode == asym ]] && asym=(--asymmetric)
    local out="$work/${label}_b${bits}_g${group}_${mode}"
    echo "== $label: bits $bits group $group $mode"
    "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$actor" --target_dir "$out" \
        --quantize --bits "$bits" --group_size "$group" "${asym[@]}" --max-memory 1MiB \
        || fail "quantized merge ($label $5)"
    "$python" "$checker" --out "$out" --ref "$ref" --bits "$bits" --group "$group" "${asym[@]}" \
        || fail "check_quantized ($label $5)"
    "$vmerge" verify --target_dir "$out" || fail "verify ($label $5)"
}

"$vmerge" merge --local_dir "$actor" --target_dir "$work/ref" --quiet || fail "unquantized merge"
# bits group symmetric|asymmetric. I=344 is not a multiple of 32, 64 or 128, so down_proj stays
# BF16 (and is listed in `ignore`) in every grouped case and is quantized only per channel (G=0).
for c in "4 32 sym" "4 32 asym" "8 0 sym" "8 64 asym" "4 128 sym"; do
    check_case example "$actor" "$work/ref" 2 "$c"
done
# The same packed weights through the HDF5 archive: model.h5 with 3 ranks, back with 2.
echo "== example: bits 4 group 32 sym into HDF5 and back"
"$mpiexec" --oversubscribe -np 3 "$vmerge" merge -q --local_dir "$actor" --target_dir "$work/h5" --format hdf5 \
    --quantize --bits 4 --group_size 32 --max-memory 1MiB || fail "quantized hdf5 merge"
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge -q --backend hdf5 --local_dir "$work/h5" --target_dir "$work/h5_hf" \
    || fail "quantized hdf5 -> HF"
"$python" "$checker" --out "$work/h5_hf" --ref "$work/ref" --bits 4 --group 32 || fail "check_quantized (hdf5)"
if [[ -n $megatron_fixtures ]]; then
    moe="$megatron_fixtures/verl_qwen2moe_tp2_ep2/actor"  # H=32, experts Fm=16, shared 24
    "$vmerge" merge --local_dir "$moe" --target_dir "$work/moe_ref" --quiet || fail "unquantized MoE merge"
    for c in "4 0 sym" "8 32 asym"; do
        check_case moe "$moe" "$work/moe_ref" 3 "$c"
    done
fi
rm -rf "$work"
echo "quantize_cases: all cases passed"
