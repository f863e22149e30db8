#!/bin/bash
# Every flag of verl's mergers (python -m verl.model_merger and scripts/legacy_model_merger.py),
# spelled as verl spells them, on a verl layout v2 run (make_verl_v2_fixtures.py); the table in
# docs/usage.md says what each does. The Hugging Face CLI is a fake `hf` / `huggingface-cli` on
# PATH that records its arguments.
# usage: verl_cli.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fx=$5 work=$6
rm -rf "$work" && mkdir -p "$work/bin_hf" "$work/bin_cli" "$work/bin_failing"
source "$source_dir/tests/integration/expect_failed_merge.sh"
fake_cli() {  # fake_cli PATH EXIT: records its arguments beside itself
    printf '#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\nexit %s\n' "$2" >"$1"
    chmod +x "$1"
}
fake_cli "$work/bin_hf/hf" 0
fake_cli "$work/bin_cli/huggingface-cli" 0
fake_cli "$work/bin_failing/hf" 3
run="$fx/dist_run"

# verl.model_merger merge: --backend, --local_dir, --hf_model_path (legacy merger), --trust-remote-code,
# --use_cpu_initialization, an existing empty --target_dir, --hf_upload_path with --private.
target="$work/out"
mkdir "$target"
PATH="$work/bin_hf:$PATH" "$mpiexec" --oversubscribe -np 2 "$vmerge" merge --backend megatron --local_dir "$run" \
    --hf_model_path "$fx/base_model" --trust-remote-code --use_cpu_initialization --target_dir "$target" \
    --hf_upload_path me/tiny --private
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target" --ref "$fx/reference_step20"
[[ $(cat "$work/bin_hf/args") == "upload me/tiny $target --repo-type model --private" ]] ||
    { echo "FAIL: hf called with: $(cat "$work/bin_hf/args")"; exit 1; }

# huggingface-cli when there is no `hf`; no --private: a public repo.
PATH="$work/bin_cli:$PATH" "$vmerge" merge --backend megatron --local_dir "$run" --hf_model_path "$fx/base_model" \
    --target_dir "$work/out2" --hf_upload_path me/tiny2 --quiet
[[ $(cat "$work/bin_cli/args") == "upload me/tiny2 $work/out2 --repo-type model" ]] ||
    { echo "FAIL: huggingface-cli called with: $(cat "$work/bin_cli/args")"; exit 1; }

# No CLI on PATH: refused before anything is merged. A failing upload: an error, the merge stays.
expect_failed_merge "$work/out3" "neither \`hf\` nor \`huggingface-cli\` is on PATH" \
    env PATH=/usr/bin:/bin "$vmerge" merge --local_dir "$run" --hf_model_path "$fx/base_model" \
    --target_dir "$work/out3" --hf_upload_path me/tiny
rc=0
PATH="$work/bin_failing:$PATH" "$vmerge" merge --local_dir "$run" --hf_model_path "$fx/base_model" \
    --target_dir "$work/out4" --hf_upload_path me/tiny >"$work/log" 2>&1 || rc=$?
cat "$work/log"
[[ $rc -ne 0 ]] && grep -qF "failed (exit status 3); the merged folder $work/out4 stays" "$work/log"
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$work/out4" --ref "$fx/reference_step20"

# test: --test_hf_dir; --tie-word-embedding and --is-value-model are honoured (this model is neither:
# each says so and nothing is written).
"$mpiexec" --oversubscribe -np 3 "$vmerge" test --backend megatron --local_dir "$run" \
    --hf_model_path "$fx/base_model" --trust-remote-code --test_hf_dir "$fx/reference_step20"
expect_failed_merge "$work/tied" "lm_head.weight differs from model.embed_tokens.weight" \
    "$vmerge" merge --backend megatron --local_dir "$run" --hf_model_path "$fx/base_model" --tie-word-embedding \
    --target_dir "$work/tied"
expect_failed_merge "$work/value" "score.weight" \
    "$vmerge" merge --backend megatron --local_dir "$run" --hf_model_path "$fx/base_model" --is-value-model \
    --target_dir "$work/value"
expect_failed_merge "$work/two" "--hf_model_path and --hf_config name two folders" \
    "$vmerge" merge --local_dir "$run" --hf_model_path "$fx/base_model" --hf_config "$fx/reference_hf" \
    --target_dir "$work/two"
rm -rf "$work"
echo "verl CLI flags: OK"
