#!/bin/bash
# `vmerge-mpi watch` against a fake training run: a writer copies the example FSDP checkpoint in
# step by step. Checks: a half-written step is left alone until complete; each complete step is
# merged once and bit-exact (independent checker against the generator's reference); a second
# watcher on the same target root is refused while the first runs; a watcher killed mid-merge
# resumes the step; --keep_last removes only older merged outputs; a Megatron-LM run (tracker
# rule) merges under mpirun -np 2, each iteration bit-exact to its reference.
# With --reuse of the previous step (the default): unchanged steps link every file, a step with
# one tensor changed writes only the file holding it, a LoRA-only run links its base; a
# torchtitan HF save (last_save_in_hf) counts as complete by its index.
# usage: watch_run.sh VMERGE MPIEXEC PYTHON SOURCE_DIR MEGATRON_FIXTURES WORK FIXTURES
#        (FIXTURES: the build's fixtures/ with verl_v2/ and torchtitan/; KEEP=1 keeps WORK)
set -uo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 megatron=$5 work=$6 fixtures=$7
example=$source_dir/examples/tiny-qwen2-fsdp/global_step_1
rm -rf "$work"
mkdir -p "$work/run"
fail() { echo "FAIL: $*"; exit 1; }
check() { "$python" "$source_dir/tests/tools/check_hf_output.py" --out "$1" --ref "$2" >/dev/null || fail "$1 differs from $2"; }
run=$work/run out=$work/out

# Step 1 complete (the tracker says so); step 2 half-written: one of its two rank files.
mkdir -p "$run/global_step_1" "$run/global_step_2/actor"
cp -r "$example/actor" "$run/global_step_1/"
cp "$example/actor/fsdp_config.json" "$example/actor/model_world_size_2_rank_0.pt" "$run/global_step_2/actor/"
printf 1 > "$run/latest_checkpointed_iteration.txt"
"$vmerge" watch --root "$run" --target_root "$out" --once --settle 0 >"$work/pass1.log" 2>&1 || { cat "$work/pass1.log"; fail "first pass"; }
check "$out/global_step_1" "$example/reference"
[[ ! -e $out/global_step_2 ]] || fail "the half-written step 2 was merged"
grep -q "global_step_2: waiting (1 of 2 rank files present)" "$work/pass1.log" || { cat "$work/pass1.log"; fail "no waiting line"; }
echo "ok   step 1 merged bit-exact; half-written step 2 left alone"

# Step 2 completes, without a tracker update: merged once its files have settled.
cp -r "$example/actor/huggingface" "$example/actor/model_world_size_2_rank_1.pt" "$run/global_step_2/actor/"
"$vmerge" watch --root "$run" --target_root "$out" --once --settle 3600 >"$work/pass2.log" 2>&1 || fail "second pass"
[[ ! -e $out/global_step_2 ]] || fail "step 2 merged before its settle time"
grep -q "global_step_2: waiting (all 2 rank files present, last changed" "$work/pass2.log" || { cat "$work/pass2.log"; fail "no settle line"; }
before=$(stat -c %Y "$out/global_step_1/model.safetensors")
"$vmerge" watch --root "$run" --target_root "$out" --once --settle 0 >"$work/pass3.log" 2>&1 || fail "third pass"
check "$out/global_step_2" "$example/reference"
grep -q "global_step_1: merging" "$work/pass3.log" && fail "step 1 merged twice"
[[ $(stat -c %Y "$out/global_step_1/model.safetensors") == "$before" ]] || fail "step 1 rewritten"
echo "ok   step 2 merged after settling; step 1 not merged again"

# Step 3: a watcher killed while it writes; a second watcher is refused meanwhile; the next
# watcher resumes the step.
mkdir -p "$run/global_step_3"
cp -r "$example/actor" "$run/global_step_3/"
printf 3 > "$run/latest_checkpointed_iteration.txt"
VMERGE_TEST_BLOCK_DELAY_MS=400 "$vmerge" watch --root "$run" --target_root "$out" --once --max-shard-size 300KB \
    --max-memory 1MiB >"$work/killed.log" 2>&1 &
watcher=$!
for _ in $(seq 1 100); do
    [[ -n $(cat "$out"/.global_step_3.vmerge-staging/.vmerge-journal/rank-* 2>/dev/null) ]] && break
    sleep 0.1
done
"$vmerge" watch --root "$run" --target_root "$out" --once >"$work/second.log" 2>&1 && fail "a second watcher ran beside the first"
grep -q "another merge into this target is running" "$work/second.log" || { cat "$work/second.log"; fail "second watcher: no clear refusal"; }
kill -9 "$watcher"
wait "$watcher" 2>/dev/null
[[ ! -e $out/global_step_3 && -d $out/.global_step_3.vmerge-staging ]] || fail "the killed watcher left no staging folder"
"$vmerge" watch --root "$run" --target_root "$out" --once --max-shard-size 300KB --max-memory 1MiB >"$work/resume.log" 2>&1 ||
    { cat "$work/resume.log"; fail "resume pass"; }
grep -q "global_step_3: resuming" "$work/resume.log" || { cat "$work/resume.log"; fail "the interrupted step was not resumed"; }
check "$out/global_step_3" "$example/reference"
echo "ok   killed watcher: a second one refused meanwhile, the next one resumed step 3 bit-exact"

# --keep_last 2: step 1's output goes; a folder of the user's beside them stays.
mkdir -p "$out/notes" && echo mine > "$out/notes/readme.txt"
"$vmerge" watch --root "$run" --target_root "$out" --once --keep_last 2 >"$work/keep.log" 2>&1 || fail "keep_last pass"
[[ ! -e $out/global_step_1 && -d $out/global_step_2 && -d $out/global_step_3 && -f $out/notes/readme.txt ]] ||
    fail "--keep_last 2 did not keep exactly steps 2 and 3 (and the user's folder)"
echo "ok   --keep_last 2 removed step 1's output only"

# What --keep_last may never remove: a user's folder at a step's target, and a link there to
# the checkpoint itself. Both steps are refused (not merged), and nothing of either is touched.
for k in 4 5; do mkdir -p "$run/global_step_$k" && cp -r "$example/actor" "$run/global_step_$k/"; done
printf 5 > "$run/latest_checkpointed_iteration.txt"
mkdir -p "$out/global_step_4" && echo mine > "$out/global_step_4/readme.txt"
ln -s "$run/global_step_1/actor" "$out/global_step_5"
before=$(find "$run" "$out/global_step_4" -type f -exec sha256sum {} + | sort)
"$vmerge" watch --root "$run" --target_root "$out" --once --keep_last 1 >"$work/guard.log" 2>&1 &&
    fail "steps whose targets are a user's folder and a link to the checkpoint were merged"
grep -q "global_step_4: .*error\|error: global_step_4" "$work/guard.log" || { cat "$work/guard.log"; fail "step 4: no error"; }
grep -q "error: global_step_5" "$work/guard.log" || { cat "$work/guard.log"; fail "step 5: no error"; }
[[ -f $out/global_step_4/readme.txt && -L $out/global_step_5 ]] || fail "--keep_last removed a folder vmerge did not write"
[[ $(find "$run" "$out/global_step_4" -type f -exec sha256sum {} + | sort) == "$before" ]] ||
    fail "the run or the user's folder changed"
[[ -d $out/global_step_3 && ! -e $out/global_step_2 ]] || fail "--keep_last 1 did not keep exactly the newest merged step"
echo "ok   --keep_last never removes a user's folder or a link to the checkpoint at a step's target"

# Reuse: steps 1 and 2 identical, step 3 with one tensor changed (the generator's --perturb, with
# its own reference), 7 output files, 2 ranks. Step 2 links all 7 files of step 1; step 3 links
# the 6 without that tensor and writes only the one with it; each step bit-exact.
run2=$work/run2 out2=$work/out2 changed=model.layers.2.mlp.down_proj.weight
"$python" "$source_dir/tests/fixtures/make_fsdp_fixtures.py" --example "$work/perturbed/actor" --perturb "$changed" >/dev/null ||
    fail "perturbed example"
for k in 1 2 3; do mkdir -p "$run2/global_step_$k"; done
cp -r "$example/actor" "$run2/global_step_1/" && cp -r "$example/actor" "$run2/global_step_2/"
cp -r "$work/perturbed/actor" "$run2/global_step_3/"
printf 3 > "$run2/latest_checkpointed_iteration.txt"
"$mpiexec" --oversubscribe -np 2 "$vmerge" watch --root "$run2" --target_root "$out2" --once --max-shard-size 300KB \
    --max-memory 1MiB >"$work/reuse.log" 2>&1 || { cat "$work/reuse.log"; fail "reuse run"; }
check "$out2/global_step_1" "$example/reference"
check "$out2/global_step_2" "$example/reference"
check "$out2/global_step_3" "$work/perturbed/reference"
inode() { stat -c %i "$1"; }
files=$(cd "$out2/global_step_1" && ls model-*.safetensors)
[[ $(wc -w <<<"$files") == 7 ]] || fail "expected 7 output files, got: $files"
with_changed=$("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['weight_map'][sys.argv[2]])" \
    "$out2/global_step_3/model.safetensors.index.json" "$changed")
for f in $files; do
    [[ $(inode "$out2/global_step_2/$f") == $(inode "$out2/global_step_1/$f") ]] || fail "step 2: $f not linked from step 1"
    if [[ $f == "$with_changed" ]]; then
        [[ $(inode "$out2/global_step_3/$f") != $(inode "$out2/global_step_2/$f") ]] || fail "step 3: changed $f was linked"
    else
        [[ $(inode "$out2/global_step_3/$f") == $(inode "$out2/global_step_2/$f") ]] || fail "step 3: $f not linked"
    fi
done
grep -q "reused $out2/global_step_1: 7 of 7 files unchanged" "$work/reuse.log" || { cat "$work/reuse.log"; fail "step 2: no reuse line"; }
grep -q "reused $out2/global_step_2: 6 of 7 files unchanged" "$work/reuse.log" || { cat "$work/reuse.log"; fail "step 3: no reuse line"; }
for k in 1 2 3; do "$vmerge" verify --target_dir "$out2/global_step_$k" >/dev/null || fail "verify step $k"; done
grep -E "reused|merged in" "$work/reuse.log"
echo "ok   --reuse: an unchanged step links all 7 files, a one-tensor change writes only $with_changed"

# A LoRA-only run (verl FSDP save_lora_only) saved at steps 4 and 8, extracted onto --lora_base:
# the base model file is the same at both steps and linked; step 8 writes only its adapter.
v2=$fixtures/verl_v2
"$vmerge" watch --root "$v2/fsdp_lora_watch" --target_root "$work/lora" --lora_base "$v2/fsdp_lora_base" --once \
    >"$work/lora.log" 2>&1 || { cat "$work/lora.log"; fail "LoRA-only run"; }
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/lora/global_step_4" --ref "$v2/fsdp_lora.extract" \
    --mode extract >/dev/null || fail "LoRA step 4 differs from its reference"
"$python" "$source_dir/tests/tools/check_lora_output.py" --out "$work/lora/global_step_8" \
    --ref "$v2/fsdp_lora_step8.extract" --mode extract >/dev/null || fail "LoRA step 8 differs from its reference"
[[ $(inode "$work/lora/global_step_8/model.safetensors") == $(inode "$work/lora/global_step_4/model.safetensors") ]] ||
    fail "LoRA step 8: the base model was written again, not linked"
adapter=lora_adapter/adapter_model.safetensors
[[ $(inode "$work/lora/global_step_8/$adapter") != $(inode "$work/lora/global_step_4/$adapter") ]] ||
    fail "LoRA step 8: the changed adapter was linked"
grep "reused" "$work/lora.log"
echo "ok   LoRA-only run: the base written once and linked into step 8, each step's adapter its own"

# torchtitan: a DCP step-5 (.metadata) and the last step saved as HF safetensors (last_save_in_hf).
tt=$fixtures/torchtitan
"$vmerge" watch --root "$tt/llama3_hf/outputs/checkpoint" --target_root "$work/tt" --hf_config "$tt/llama3/hf" --once \
    >"$work/tt.log" 2>&1 || { cat "$work/tt.log"; fail "torchtitan run"; }
grep -q "step-10: merging .*model.safetensors.index.json present" "$work/tt.log" || { cat "$work/tt.log"; fail "HF step not seen as complete"; }
check "$work/tt/step-10" "$tt/llama3_hf/reference"
echo "ok   torchtitan run: the HF-saved step 10 merged once its index was there"

# DeepSpeed: a save_dir whose latest names global_step5 while global_step10 is being written (its
# files all there, latest not yet rewritten); then latest names global_step10. And an HF Trainer
# output_dir: checkpoint-5/ complete once its trainer_state.json is there.
ds=$fixtures/deepspeed dsrun=$work/dsrun
mkdir -p "$dsrun" && cp -r "$ds/zero2_w16/." "$dsrun/" && cp -r "$dsrun/global_step5" "$dsrun/global_step10"
"$vmerge" watch --root "$dsrun" --target_root "$work/ds" --hf_config "$ds/zero2_w16.hf" --once >"$work/ds1.log" 2>&1 ||
    { cat "$work/ds1.log"; fail "DeepSpeed run, first pass"; }
check "$work/ds/global_step5" "$ds/zero2_w16.reference"
[[ ! -e $work/ds/global_step10 ]] || fail "DeepSpeed global_step10 merged before latest named it"
grep -q "global_step10: waiting (DeepSpeed latest names global_step5)" "$work/ds1.log" || { cat "$work/ds1.log"; fail "no waiting line"; }
printf global_step10 > "$dsrun/latest"
"$vmerge" watch --root "$dsrun" --target_root "$work/ds" --hf_config "$ds/zero2_w16.hf" --once >"$work/ds2.log" 2>&1 ||
    { cat "$work/ds2.log"; fail "DeepSpeed run, second pass"; }
check "$work/ds/global_step10" "$ds/zero2_w16.reference"
grep -q "reused $work/ds/global_step5: 1 of 1 files unchanged" "$work/ds2.log" || { cat "$work/ds2.log"; fail "DeepSpeed: no reuse"; }
trainer=$work/trainer
mkdir -p "$trainer" && cp -r "$ds/zero2_bf16_w3/checkpoint-5" "$trainer/"
"$vmerge" watch --root "$trainer" --target_root "$work/tr" --once >"$work/tr1.log" 2>&1 || fail "Trainer run, first pass"
grep -q "checkpoint-5: waiting (no trainer_state.json yet)" "$work/tr1.log" || { cat "$work/tr1.log"; fail "Trainer: no waiting line"; }
echo '{"global_step": 5}' > "$trainer/checkpoint-5/trainer_state.json"
"$vmerge" watch --root "$trainer" --target_root "$work/tr" --once >"$work/tr2.log" 2>&1 || { cat "$work/tr2.log"; fail "Trainer run"; }
check "$work/tr/checkpoint-5" "$ds/zero2_bf16_w3.reference"
echo "ok   DeepSpeed save_dir (by latest) and HF Trainer checkpoint-N (by trainer_state.json) merged once complete"

# A Megatron-LM run (tracker at iteration 20) under mpirun -np 2.
"$mpiexec" --oversubscribe -np 2 "$vmerge" watch --root "$megatron/mlm_llama_tp2_pp2/ckpt" --target_root "$work/mlm" \
    --hf_config "$megatron/mlm_llama_tp2_pp2/hf" --once -q >"$work/mlm.log" 2>&1 || { cat "$work/mlm.log"; fail "Megatron run"; }
check "$work/mlm/iter_0000010" "$megatron/mlm_llama_tp2_pp2/reference_iter10"
check "$work/mlm/iter_0000020" "$megatron/mlm_llama_tp2_pp2/reference"
echo "ok   Megatron-LM run: iterations 10 and 20 merged with 2 ranks, bit-exact"

"$vmerge" watch --root "$run" --target_root "$run/merged" --once >"$work/inside.log" 2>&1 && fail "target root inside the run accepted"
grep -q "error:" "$work/inside.log" || fail "target root inside the run: no error"
echo "ok   a target root inside the run is refused"
[[ -n ${KEEP:-} ]] || rm -rf "$work"
