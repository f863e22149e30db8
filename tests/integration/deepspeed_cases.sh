#!/bin/bash
# Every DeepSpeed fixture case (make_deepspeed_fixtures.py) in one process, to keep CI short:
# each good case merged with 1, 2 and 3 ranks (small shards and a small --max-memory on the
# later runs, so partitions are read in row blocks) and checked bit for bit by the independent
# checker, by vmerge's own `test` and by `verify`; each failure case must fail with its
# message and leave nothing behind.
# usage: deepspeed_cases.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 work=$6
source "$source_dir/tests/integration/expect_failed_merge.sh"
rm -rf "$work"
mkdir -p "$work"
cases=$("$python" -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))))' "$fixtures/cases.json")
for case in $cases; do
    eval "$("$python" "$source_dir/tests/integration/case_fields.py" "$fixtures/cases.json" "$case")"
    args=("${merge_args[@]}")
    hf_dir="$fixtures/$local_dir"
    if [[ -n $hf_config ]]; then
        args+=(--hf_config "$fixtures/$hf_config")
        hf_dir="$fixtures/$hf_config"
    fi
    target="$work/$case"
    if [[ -n $expected_error ]]; then
        expect_failed_merge "$target" "$expected_error" \
            "$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$fixtures/$local_dir" --target_dir "$target" "${args[@]}"
        echo "ok $case: fails naming '$expected_error'"
        continue
    fi
    for np in 1 2 3; do
        sizes=()
        [[ $np -gt 1 ]] && sizes=(--max-shard-size 6KB --max-memory 2KB)
        "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$fixtures/$local_dir" --target_dir "$target.np$np" \
            "${args[@]}" "${sizes[@]}" --quiet
        # HF Trainer's checkpoint-N/: the model files are copied, the training state beside them not.
        "$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target.np$np" --ref "$fixtures/$reference" --hf "$hf_dir" \
            --hf-training latest --hf-training zero_to_fp32.py --hf-training trainer_state.json
    done
    "$mpiexec" --oversubscribe -np 3 "$vmerge" test --local_dir "$fixtures/$local_dir" --test_hf_dir "$fixtures/$reference" "${args[@]}"
    "$vmerge" verify --target_dir "$target.np2"
    rm -rf "$target".np*
    echo "ok $case: 1, 2, 3 ranks bit for bit"
done
# The tag folder itself as --local_dir (config.json found beside `latest`, one level up), and
# --tag picking the folder a broken `latest` does not name.
"$vmerge" test --local_dir "$fixtures/zero3_frozen_tied/checkpoint-5/global_step5/" --test_hf_dir "$fixtures/zero3_frozen_tied.reference"
"$vmerge" test --local_dir "$fixtures/bad_missing_tag" --tag pytorch_model --hf_config "$fixtures/zero1_fp16_fp32.hf" \
    --dtype fp32 --test_hf_dir "$fixtures/zero1_fp16_fp32.reference"
echo "ok: a tag folder as --local_dir, --tag"
