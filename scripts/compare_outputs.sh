#!/bin/bash
# Merges every generated fixture case (FSDP, Megatron, LoRA; the real torch 2.11 files; an
# HDF5 archive and its way back; the example model and the torch 2.11 FSDP2 saves under every
# --quantize scheme, FP8 and 4-bit float in BF16, F16 and F32 too) with two vmerge-mpi binaries
# and compares the output folders
# file by file with cmp: a refactoring must leave every byte as it was. Timing lines differ
# between runs, so only the folders are compared, plus the exit codes.
#   scripts/compare_outputs.sh OLD_BINARY NEW_BINARY FIXTURES_DIR WORK [BENCH_DIR]
# FIXTURES_DIR: ctest's build/fixtures (fsdp/, megatron/, lora/ with their cases.json).
# BENCH_DIR (optional): benchmark checkpoints made by scripts/bench/make_bench_*.py, each in its
# folder: fsdp/ (make_bench_checkpoint.py), megatron/, lora/ (its global_step_1/actor),
# deepspeed/; merged as they are and with the output options the benchmarks use (fsdp/ under
# every --quantize scheme).
set -uo pipefail
old=$1 new=$2 fixtures=$3 work=$4 bench=${5:-}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${VMERGE_TEST_PYTHON:-/usr/bin/python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$work"
mkdir -p "$work"
same=0 differ=0

# A compressed archive's chunks land in the file in the order the compressor threads finish, so
# two runs of one binary differ in chunk addresses (and the checksums of those bytes): such a
# pair is the same output when every other file is identical and h5diff (with the zstd filter
# plugin the build made) finds the datasets and attributes equal.
same_archive_content() {
    local a=$1 b=$2
    [[ -f $a/model.h5 && -f $b/model.h5 ]] || return 1
    diff -r -x model.h5 -x vmerge.checksums.json "$a" "$b" >/dev/null 2>&1 || return 1
    HDF5_PLUGIN_PATH="$(dirname "$new")/hdf5-plugins" h5diff "$a/model.h5" "$b/model.h5" >/dev/null 2>&1
}

# run_both NAME ARGS...: the merge with each binary into $work/{old,new}/NAME, then cmp -r.
run_both() {
    local name=$1
    shift
    local rc_old rc_new
    # One target path for both (outputs may name it, e.g. an adapter's base_model_name_or_path).
    mkdir -p "$work/old" "$work/new"
    "$old" merge --target_dir "$work/out/$name" --quiet "$@" >"$work/$name.old.log" 2>&1
    rc_old=$?
    [[ -d $work/out/$name ]] && mv "$work/out/$name" "$work/old/$name"
    "$new" merge --target_dir "$work/out/$name" --quiet "$@" >"$work/$name.new.log" 2>&1
    rc_new=$?
    [[ -d $work/out/$name ]] && mv "$work/out/$name" "$work/new/$name"
    if [[ $rc_old -ne $rc_new ]]; then
        echo "DIFFER $name: exit $rc_old (old) vs $rc_new (new)"; differ=$((differ + 1)); return
    fi
    if [[ $rc_old -ne 0 ]]; then
        echo "same   $name: both exit $rc_old"; same=$((same + 1)); return
    fi
    if diff -r "$work/old/$name" "$work/new/$name" >"$work/$name.diff" 2>&1; then
        echo "same   $name: $(find "$work/new/$name" -type f | wc -l) files identical"; same=$((same + 1))
    elif same_archive_content "$work/old/$name" "$work/new/$name"; then
        echo "same   $name: model.h5 datasets identical (h5diff; a compressed archive's chunk order varies run to run)"
        same=$((same + 1))
    else
        echo "DIFFER $name:"; head -5 "$work/$name.diff"; differ=$((differ + 1))
    fi
}

for kind in fsdp megatron lora; do
    cases=$fixtures/$kind/cases.json
    [[ -f $cases ]] || { echo "no $cases: run the fixture generators (ctest -R fixtures_generate)"; exit 2; }
    for case in $("$python" -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))))' "$cases"); do
        eval "$("$python" "$here/tests/integration/case_fields.py" "$cases" "$case")"
        args=(--local_dir "$fixtures/$kind/$local_dir" "${merge_args[@]}")
        [[ -n $hf_config ]] && args+=(--hf_config "$fixtures/$kind/$hf_config")
        run_both "$kind.$case" "${args[@]}"
    done
done
for case in "$here"/tests/fixtures/torch2/fsdp2_*; do
    name=$(basename "$case")
    args=(--local_dir "$case")
    [[ $name == *_dcp ]] && args+=(--hf_config "$here/tests/fixtures/torch2/reference_fp32")
    run_both "torch2.$name" "${args[@]}"
done
run_both example "--local_dir" "$here/examples/tiny-qwen2-fsdp/global_step_1/actor" --max-shard-size 1MB
example_dir=$here/examples/tiny-qwen2-fsdp/global_step_1/actor
run_both example.int4 --local_dir "$example_dir" --quantize --max-memory 1MiB
run_both example.int8.asym --local_dir "$example_dir" --quantize --bits 8 --asymmetric --group_size 32
run_both example.resume --local_dir "$example_dir" --quantize --resume --max-shard-size 1MB
# Every FP8 and 4-bit float scheme, in each weight dtype their kernels specialise (BF16, F16,
# F32), with small row blocks (the quantizers' outputs must not move a bit).
QUANT_SCHEMES=("fp8:--quantize=fp8" "fp8_ue8m0:--quantize=fp8 --scale_format ue8m0" "fp8_block:--quantize=fp8-block"
               "fp8_dynamic:--quantize=fp8-dynamic" "nvfp4:--quantize=nvfp4" "mxfp4:--quantize=mxfp4")
for entry in "${QUANT_SCHEMES[@]}"; do
    name=${entry%%:*}
    read -r -a flags <<<"${entry#*:}"
    for dtype in bf16 fp16 fp32; do
        run_both "example.$name.$dtype" --local_dir "$example_dir" "${flags[@]}" --dtype "$dtype" --max-memory 1MiB
    done
    for case in "$here"/tests/fixtures/torch2/fsdp2_w2 "$here"/tests/fixtures/torch2/fsdp2_w3; do
        run_both "torch2.$(basename "$case").$name" --local_dir "$case" "${flags[@]}" --dtype bf16
    done
done
run_both example.hdf5 "--local_dir" "$here/examples/tiny-qwen2-fsdp/global_step_1/actor" --format hdf5
# The archive back: each binary converts the archive it wrote.
for which in old new; do
    bin=$old
    [[ $which == new ]] && bin=$new
    "$bin" merge --backend hdf5 --local_dir "$work/$which/example.hdf5" --target_dir "$work/out/example.hdf5.back" \
        --quiet >/dev/null 2>&1
    mv "$work/out/example.hdf5.back" "$work/$which/example.hdf5.back"
done
if diff -r "$work/old/example.hdf5.back" "$work/new/example.hdf5.back" >/dev/null; then
    echo "same   example.hdf5.back"; same=$((same + 1))
else
    echo "DIFFER example.hdf5.back"; differ=$((differ + 1))
fi
if [[ -n $bench ]]; then
    run_both bench.fsdp --local_dir "$bench/fsdp"
    run_both bench.fsdp.small_shards --local_dir "$bench/fsdp" --max-memory 64MiB --max-shard-size 100MB
    for entry in "${QUANT_SCHEMES[@]}"; do
        read -r -a flags <<<"${entry#*:}"
        run_both "bench.fsdp.${entry%%:*}" --local_dir "$bench/fsdp" "${flags[@]}"
    done
    run_both bench.fsdp.int4 --local_dir "$bench/fsdp" --quantize
    run_both bench.fsdp.hdf5 --local_dir "$bench/fsdp" --format hdf5 --compress zstd
    run_both bench.megatron --local_dir "$bench/megatron"
    run_both bench.lora --local_dir "$bench/lora/global_step_1/actor"
    run_both bench.lora.merged --local_dir "$bench/lora/global_step_1/actor" --merge_lora
    run_both bench.deepspeed --local_dir "$bench/deepspeed"
fi
echo "$same identical, $differ different"
[[ $differ -eq 0 ]]
