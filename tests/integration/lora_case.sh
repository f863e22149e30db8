#!/bin/bash
# Merges one LoRA fixture case (make_lora_fixtures.py) with N ranks and checks it: the
# independent checker (extract: model and adapter bit for bit, adapter_config.json fields;
# merge: within --max-ulp of torch's fp32 W + s·B·A), vmerge's own `test` against the
# reference, `verify`, and for merges that `test` calls a model without the adapter a failure.
# Error cases must fail with their message and leave nothing.
# usage: lora_case.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES CASE NP WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 case=$6 np=$7 work=$8

eval "$("$python" "$source_dir/tests/integration/case_fields.py" "$fixtures/cases.json" "$case")"
local_dir="$fixtures/$local_dir"
target="$work/$case.np$np"
rm -rf "$target" "$target.base_only"
mkdir -p "$work"
launch=("$mpiexec" --oversubscribe -np "$np")

if [[ -n $expected_error ]]; then
    source "$source_dir/tests/integration/expect_failed_merge.sh"
    for mode_flag in --extract_lora --merge_lora; do
        expect_failed_merge "$target" "$expected_error" \
            "${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" "${merge_args[@]}" "$mode_flag"
    done
    exit 0
fi

reference="$fixtures/$reference"
"${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" "${merge_args[@]}" --max-shard-size 20KB
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$target" --ref "$reference" --mode "$mode"
"${launch[@]}" "$vmerge" test --local_dir "$local_dir" --test_hf_dir "$reference" "${merge_args[@]}"
"${launch[@]}" "$vmerge" verify --target_dir "$target"
if [[ $mode == merge && -n $base_reference ]]; then
    # What a merger that drops the adapter writes: the base model alone.
    cp -r "$fixtures/$base_reference" "$target.base_only"
    rm -rf "$target.base_only/lora_adapter"
    set +e
    "${launch[@]}" "$vmerge" test --local_dir "$local_dir" --test_hf_dir "$target.base_only" "${merge_args[@]}" >"$target.log" 2>&1
    rc=$?
    set -e
    cat "$target.log"
    [[ $rc -ne 0 ]] || { echo "FAIL: test accepted the base model as the LoRA merge"; exit 1; }
    grep -qF "the adapter was not merged" "$target.log" || { echo "FAIL: test did not say the adapter is missing"; exit 1; }
    rm -rf "$target.base_only" "$target.log"
fi
