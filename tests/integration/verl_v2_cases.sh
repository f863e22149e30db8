#!/bin/bash
# The checkpoints verl writes today (make_verl_v2_fixtures.py): layout v2 driven by
# ckpt_contents.json, the migrated pre-v2 layout, and every folder level a user may pass (run
# folder, global_step_N/, role folder), each compared bit for bit with the reference the
# generator wrote from the original tensors, with 1, 2 and 3 ranks; one real merge per layout
# checked by the independent checker and `verify`; the failure cases (incomplete save, no
# config, two roles, no LoRA alpha) each one clear error and no target.
# usage: verl_v2_cases.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fx=$5 work=$6
rm -rf "$work" && mkdir -p "$work"
source "$source_dir/tests/integration/expect_failed_merge.sh"
# One rank runs without mpiexec (the one-rank Comm): the same code, a second less per call.
on() {
    local np=$1
    shift
    if [[ $np == 1 ]]; then "$vmerge" "$@"; else "$mpiexec" --oversubscribe -np "$np" "$vmerge" "$@"; fi
}
base=(--hf_config "$fx/base_model")

# Dist-only v2 (no config saved anywhere): every level, 1/2/3 ranks.
for np in 1 2 3; do
    for level in dist_run dist_run/global_step_20 dist_run/global_step_20/actor; do
        on "$np" test --local_dir "$fx/$level" "${base[@]}" --test_hf_dir "$fx/reference_step20" --quiet
    done
done
on 2 test --local_dir "$fx/dist_run" --step 10 "${base[@]}" --test_hf_dir "$fx/reference_step10"
on 3 test --local_dir "$fx/two_roles/global_step_5" --role critic "${base[@]}" --test_hf_dir "$fx/reference_step20"
# inspect says where the levels led.
on 1 inspect --local_dir "$fx/dist_run" "${base[@]}" >"$work/inspect.txt"
grep -qF "resolved     run folder $fx/dist_run: latest_checkpointed_iteration.txt names step 20 -> global_step_20/" "$work/inspect.txt"
grep -qF "resolved     step folder: its one role folder -> $fx/dist_run/global_step_20/actor" "$work/inspect.txt"

# v2 with the bridge (HF weights and config in model/huggingface, named by the manifest), and the
# layouts verl's migration script makes (hardlinks, symlinks): no --hf_config needed.
# (HF weights are copied whole: every level with one rank, each rank count from one level.)
for level in hf_run hf_run/global_step_3 hf_run/global_step_3/actor; do
    on 1 test --local_dir "$fx/$level" --test_hf_dir "$fx/reference_hf" --quiet
done
on 2 test --local_dir "$fx/hf_run" --test_hf_dir "$fx/reference_hf" --quiet
on 3 test --local_dir "$fx/hf_run/global_step_3/actor" --test_hf_dir "$fx/reference_hf" --quiet
for np in 1 2 3; do
    on "$np" test --local_dir "$fx/migrated/actor" --test_hf_dir "$fx/reference_step20" --quiet
done
on 2 test --local_dir "$fx/migrated_symlink/actor" --test_hf_dir "$fx/reference_step20" --quiet

# Real merges, checked by the independent checker and verify.
for case in "dist_run reference_step20 ${base[*]}" "hf_run reference_hf" "migrated/actor reference_step20"; do
    read -r dir ref extra <<<"$case"
    target="$work/$(basename "$dir").merged"
    # shellcheck disable=SC2086
    on 2 merge --local_dir "$fx/$dir" --target_dir "$target" $extra --max-shard-size 20KB --quiet
    "$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target" --ref "$fx/$ref"
    on 1 verify --target_dir "$target"
done

# Failures: one clear error each, nothing left.
expect_failed_merge "$work/noconfig" "records no hf_config" \
    "$mpiexec" -np 2 "$vmerge" merge --local_dir "$fx/dist_run" --target_dir "$work/noconfig"
expect_failed_merge "$work/incomplete" "without ckpt_contents.json" \
    "$mpiexec" -np 2 "$vmerge" merge --local_dir "$fx/incomplete/actor" --target_dir "$work/incomplete" "${base[@]}"
expect_failed_merge "$work/roles" "pass --role actor or --role critic" \
    "$vmerge" merge --local_dir "$fx/two_roles/global_step_5" --target_dir "$work/roles" "${base[@]}"
expect_failed_merge "$work/step" "global_step_30: missing" \
    "$vmerge" merge --local_dir "$fx/dist_run" --step 30 --target_dir "$work/step" "${base[@]}"
# verl FSDP save_lora_only: adapter-only rank files, base from --lora_base, alpha from
# lora_train_meta.json; extracted bit for bit, folded within the checker's ulp bound.
lora=(--lora_base "$fx/fsdp_lora_base")
for level in fsdp_lora_run fsdp_lora_run/global_step_4 fsdp_lora_run/global_step_4/actor; do
    on 1 test --local_dir "$fx/$level" "${lora[@]}" --test_hf_dir "$fx/fsdp_lora.extract" --quiet
done
on 2 test --local_dir "$fx/fsdp_lora_run" "${lora[@]}" --test_hf_dir "$fx/fsdp_lora.extract" --quiet
on 3 test --local_dir "$fx/fsdp_lora_run/global_step_4" "${lora[@]}" --merge_lora --test_hf_dir "$fx/fsdp_lora.merged"
on 2 merge --local_dir "$fx/fsdp_lora_run" "${lora[@]}" --target_dir "$work/lora.extract" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/lora.extract" --ref "$fx/fsdp_lora.extract" --mode extract
on 3 merge --local_dir "$fx/fsdp_lora_run" "${lora[@]}" --merge_lora --target_dir "$work/lora.merged" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/lora.merged" --ref "$fx/fsdp_lora.merged" --mode merge
expect_failed_merge "$work/nobase" "save_lora_only checkpoint" \
    "$mpiexec" -np 2 "$vmerge" merge --local_dir "$fx/fsdp_lora_run" --target_dir "$work/nobase"
expect_failed_merge "$work/noalpha" "lora_alpha is recorded nowhere" \
    "$vmerge" merge --local_dir "$fx/fsdp_lora_noalpha/actor" "${lora[@]}" --target_dir "$work/noalpha"

# Megatron-Bridge LoRA (verl's default engine, dist off): the HF adapter export in
# model/huggingface/adapter/, alpha and r from its adapter_config.json, base from --lora_base.
bridge=(--lora_base "$fx/reference_step20")
for level in bridge_lora_run bridge_lora_run/global_step_2 bridge_lora_run/global_step_2/actor; do
    on 1 test --local_dir "$fx/$level" "${bridge[@]}" --test_hf_dir "$fx/bridge_lora.extract" --quiet
done
on 2 test --local_dir "$fx/bridge_lora_run/global_step_2" "${bridge[@]}" --test_hf_dir "$fx/bridge_lora.extract" --quiet
on 3 test --local_dir "$fx/bridge_lora_run" "${bridge[@]}" --merge_lora --test_hf_dir "$fx/bridge_lora.merged"
on 3 merge --local_dir "$fx/bridge_lora_run" "${bridge[@]}" --target_dir "$work/bridge.extract" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/bridge.extract" --ref "$fx/bridge_lora.extract" --mode extract
# The bridge's own adapter/adapter_config.json (beside config.json) is not copied: the output's
# adapter config is the one written for the adapter written.
[[ ! -e "$work/bridge.extract/adapter" ]] || { echo "bridge.extract: the export's adapter/ was copied" >&2; exit 1; }
on 2 merge --local_dir "$fx/bridge_lora_run" "${bridge[@]}" --merge_lora --target_dir "$work/bridge.merged" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/bridge.merged" --ref "$fx/bridge_lora.merged" --mode merge
expect_failed_merge "$work/bridge_nobase" "a Megatron-Bridge LoRA save holds the adapter only" \
    "$vmerge" merge --local_dir "$fx/bridge_lora_run" --target_dir "$work/bridge_nobase"
# The same save's model/dist_ckpt: adapter shards only (what Megatron-Bridge itself saves with PEFT),
# read directly onto --lora_base.
shards=(--local_dir "$fx/bridge_lora_run/global_step_2/actor/model/dist_ckpt" --hf_config "$fx/base_model" --lora_alpha 32)
on 1 test "${shards[@]}" "${bridge[@]}" --test_hf_dir "$fx/bridge_lora.extract" --quiet
on 2 test "${shards[@]}" "${bridge[@]}" --merge_lora --test_hf_dir "$fx/bridge_lora.merged" --quiet
expect_failed_merge "$work/shards_nobase" "holds only Megatron-Bridge LoRA adapter shards" \
    "$vmerge" merge "${shards[@]}" --target_dir "$work/shards_nobase"

# Megatron-Bridge LoRA with use_dist_checkpointing: frozen base, adapters (linear_in/out split by
# TP per projection, fused qkv with GQA, gate/up in linear_fc1) and _extra_state all in
# model/dist_ckpt; config and alpha recorded nowhere: --hf_config and --lora_alpha. Extracted and
# folded bit for bit from every level with one rank, and with 2 and 3 ranks from other levels.
dl=(--hf_config "$fx/base_model" --lora_alpha 24)
levels=(dist_lora_run dist_lora_run/global_step_6 dist_lora_run/global_step_6/actor)
for i in 0 1 2; do
    on 1 test --local_dir "$fx/${levels[i]}" "${dl[@]}" --test_hf_dir "$fx/dist_lora.extract" --quiet
    on 1 test --local_dir "$fx/${levels[i]}" "${dl[@]}" --merge_lora --test_hf_dir "$fx/dist_lora.merged" --quiet
done
on 2 test --local_dir "$fx/${levels[0]}" "${dl[@]}" --test_hf_dir "$fx/dist_lora.extract" --quiet
on 3 test --local_dir "$fx/${levels[2]}" "${dl[@]}" --test_hf_dir "$fx/dist_lora.extract" --quiet
on 2 test --local_dir "$fx/${levels[2]}" "${dl[@]}" --merge_lora --test_hf_dir "$fx/dist_lora.merged" --quiet
on 3 test --local_dir "$fx/${levels[1]}" "${dl[@]}" --merge_lora --test_hf_dir "$fx/dist_lora.merged" --quiet
on 3 merge --local_dir "$fx/dist_lora_run" "${dl[@]}" --target_dir "$work/dist_lora.extract" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/dist_lora.extract" --ref "$fx/dist_lora.extract" --mode extract
on 1 verify --target_dir "$work/dist_lora.extract"
on 2 merge --local_dir "$fx/dist_lora_run/global_step_6" "${dl[@]}" --merge_lora --target_dir "$work/dist_lora.merged" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/dist_lora.merged" --ref "$fx/dist_lora.merged" --mode merge
expect_failed_merge "$work/dist_lora_noalpha" "record no LoRA alpha (verl writes it only into" \
    "$mpiexec" -np 2 "$vmerge" merge --local_dir "$fx/dist_lora_run" --hf_config "$fx/base_model" \
    --target_dir "$work/dist_lora_noalpha"
# With hf_model also saved: config and the bridge's export (alpha) beside the same shards; no flags.
on 2 test --local_dir "$fx/dist_lora_hf/actor" --test_hf_dir "$fx/dist_lora.extract" --quiet
on 1 merge --local_dir "$fx/dist_lora_hf/actor" --target_dir "$work/dist_lora_hf.extract" --quiet
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/dist_lora_hf.extract" --ref "$fx/dist_lora.extract" --mode extract
[[ ! -e "$work/dist_lora_hf.extract/adapter" ]] || { echo "dist_lora_hf.extract: the export's adapter/ was copied" >&2; exit 1; }

# --allow_incomplete reads what is there.
on 2 test --local_dir "$fx/incomplete/actor" --allow_incomplete "${base[@]}" --test_hf_dir "$fx/reference_step20"
rm -rf "$work"
echo "verl v2 cases: OK"
