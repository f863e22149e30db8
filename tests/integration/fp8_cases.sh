#!/bin/bash
# `merge --quantize=fp8` (block FP8, also with --scale_format ue8m0), `--quantize=fp8-block`
# (compressed-tensors FP8_BLOCK) and `--quantize=fp8-dynamic` (compressed-tensors FP8_DYNAMIC),
# each FP8 byte and scale recomputed by an independent numpy checker (tests/tools/check_fp8.py,
# written from docs/reference/fp8-formats.md) from a reference HF folder the fixture generators
# wrote from the original tensors (the example model: its unquantized merge), every other tensor
# and file bit-identical; 1, 2 and 3 ranks with 1 MiB
# blocks; dense BF16 and FP32 masters, MoE, MLA, a value model, a LoRA fold, --quantize_ignore
# on a fused part; the shape-rule warning printed once; `inspect`; a NaN weight refused; FP8_BLOCK
# leaving the 344-input down_proj unquantized with its note, and through HDF5; --scale_format with
# another scheme refused.
# usage: fp8_cases.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FSDP_FIXTURES MEGATRON_FIXTURES LORA_FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fsdp=$5 megatron=$6 lora=$7 work=$8
checker="$source_dir/tests/tools/check_fp8.py"
example="$source_dir/examples/tiny-qwen2-fsdp/global_step_1/actor"  # H=128, I=344: partial blocks
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
"$python" "$checker" --selftest || fail "check_fp8 selftest"

# usage: run_case LABEL ACTOR REF NP SCHEME [merge flags...] [-- checker flags...]
run_case() {
    local label=$1 actor=$2 ref=$3 np=$4 scheme=$5
    shift 5
    local merge_flags=() check_flags=()
    while (($#)); do
        if [[ $1 == -- ]]; then shift; check_flags=("$@"); break; fi
        merge_flags+=("$1"); shift
    done
    local out="$work/${label}_${scheme}${suffix:-}_np${np}"
    echo "== $label: --quantize=$scheme, $np rank(s) ${merge_flags[*]}"
    "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$actor" --target_dir "$out" \
        --quantize "$scheme" --max-memory 1MiB "${merge_flags[@]}" >"$out.log" 2>&1 || { cat "$out.log"; fail "merge $label"; }
    "$python" "$checker" --out "$out" --ref "$ref" --scheme "$scheme" "${check_flags[@]}" || fail "check_fp8 $label $scheme np$np"
    "$vmerge" verify --target_dir "$out" >/dev/null || fail "verify $label"
}

"$vmerge" merge -q --local_dir "$example" --target_dir "$work/example_ref" || fail "unquantized merge"
for np in 1 3; do run_case example "$example" "$work/example_ref" $np fp8; done
run_case example "$example" "$work/example_ref" 2 fp8-dynamic
for np in 1 2 3; do run_case example "$example" "$work/example_ref" $np fp8-block; done
grep -q "Linear modules left unquantized: their input size is not a multiple of 128" "$work/example_fp8-block_np2.log" \
    || fail "fp8-block note on the 344-input down_proj"
suffix=_ue8m0 run_case example "$example" "$work/example_ref" 2 fp8 --scale_format ue8m0 -- --scale-format ue8m0
if "$vmerge" merge -q --local_dir "$example" --target_dir "$work/refused" --quantize=fp8-dynamic --scale_format ue8m0 \
    2>"$work/refused.log"; then fail "--scale_format with fp8-dynamic accepted"; fi
grep -q -- "--scale_format applies to --quantize=fp8 (block FP8)" "$work/refused.log" || fail "--scale_format refusal"
# The shape rules broken by this tiny model: each warning once, from rank 0 only.
[[ $(grep -c "block FP8 shape rule fused-parts-128" "$work/example_fp8_np3.log") == 1 ]] || fail "warning not printed once"
run_case ignore "$example" "$work/example_ref" 2 fp8 --quantize_ignore model.layers.0.self_attn.k_proj \
    -- --ignore model.layers.0.self_attn.k_proj
grep -q "left unquantized with the rest of their fused group" "$work/ignore_fp8_np2.log" || fail "fused-group note"

run_case fp32_master "$fsdp/fp32_to_bf16_w2" "$fsdp/fp32_to_bf16_w2.reference" 2 fp8
run_case fp32_master "$fsdp/fp32_to_bf16_w2" "$fsdp/fp32_to_bf16_w2.reference" 3 fp8-dynamic
# FP32 output: FP8_DYNAMIC's scales are then F32.
run_case fp32_out "$fsdp/keep_fp32_w2" "$fsdp/keep_fp32_w2.reference" 2 fp8-dynamic --dtype keep
# FP8_BLOCK scales in F32 and F16 (the output dtype): the example merged in that dtype is the reference.
for dtype in float32 float16; do
    "$vmerge" merge -q --local_dir "$example" --target_dir "$work/example_ref_$dtype" --dtype $dtype || fail "$dtype merge"
    suffix=_$dtype run_case example "$example" "$work/example_ref_$dtype" 3 fp8-block --dtype $dtype
done
run_case moe "$megatron/verl_qwen2moe_tp2_ep2/actor" "$megatron/verl_qwen2moe_tp2_ep2/reference" 3 fp8
run_case moe "$megatron/verl_qwen2moe_tp2_ep2/actor" "$megatron/verl_qwen2moe_tp2_ep2/reference" 1 fp8-dynamic
run_case mla "$megatron/verl_deepseekv3_tp2/actor" "$megatron/verl_deepseekv3_tp2/reference" 2 fp8
# Hidden size 32: every Linear stays unquantized (experts alike) and is listed, and the merge succeeds.
run_case moe "$megatron/verl_qwen2moe_tp2_ep2/actor" "$megatron/verl_qwen2moe_tp2_ep2/reference" 2 fp8-block
suffix=_ue8m0 run_case mla "$megatron/verl_deepseekv3_tp2/actor" "$megatron/verl_deepseekv3_tp2/reference" 3 fp8 \
    --scale_format ue8m0 -- --scale-format ue8m0
run_case value "$megatron/verl_qwen2_tp2_pp2_value/actor" "$megatron/verl_qwen2_tp2_pp2_value/reference" 2 fp8
run_case fold "$lora/lora_w3_uneven/global_step_1/actor" "$lora/lora_w3_uneven.merged" 3 fp8 --merge_lora
run_case fold "$lora/lora_w3_uneven/global_step_1/actor" "$lora/lora_w3_uneven.merged" 2 fp8-dynamic --merge_lora

# The HDF5 archive holds the same FP8 bytes: merged into model.h5 (zstd, several ranks), converted
# back with --backend hdf5, the folder passes the same checker.
run_hdf5_case() {
    local label=$1 actor=$2 ref=$3 np=$4 scheme=$5
    local archive="$work/${label}_${scheme}_h5" out="$work/${label}_${scheme}_h5_hf"
    echo "== $label: --quantize=$scheme into HDF5 (zstd), $np rank(s), and back"
    "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$actor" --target_dir "$archive" \
        --quantize "$scheme" --format hdf5 --compress zstd --max-memory 1MiB >"$archive.log" 2>&1 \
        || { cat "$archive.log"; fail "hdf5 merge $label"; }
    grep -q "F8_E4M3" "$archive.log" || fail "hdf5 summary has no F8_E4M3 row"
    "$mpiexec" --oversubscribe -np 2 "$vmerge" merge -q --backend hdf5 --local_dir "$archive" --target_dir "$out" \
        || fail "hdf5 -> HF $label"
    "$python" "$checker" --out "$out" --ref "$ref" --scheme "$scheme" || fail "check_fp8 hdf5 $label $scheme"
}
run_hdf5_case example "$example" "$work/example_ref" 3 fp8
run_hdf5_case example "$example" "$work/example_ref" 2 fp8-block
run_hdf5_case moe "$megatron/verl_qwen2moe_tp2_ep2/actor" "$megatron/verl_qwen2moe_tp2_ep2/reference" 2 fp8-dynamic

# inspect: sizes before and after, the rules by name.
"$vmerge" inspect --local_dir "$example" --quantize=fp8 >"$work/inspect.txt"
grep -q "^quantized    FP8 e4m3 with a float32 scale per 128x128 block (--quantize=fp8): 1.6 MiB -> 968.5 KiB" \
    "$work/inspect.txt" || { cat "$work/inspect.txt"; fail "inspect sizes"; }
grep -q "block FP8 shape rule tp-shard-128" "$work/inspect.txt" || fail "inspect shape rules"
echo "fp8_cases: all cases passed"
