#!/bin/bash
# Failures for real: (1) kill -9 one rank of an `mpirun -np 4` merge midway: every rank must
# stop quickly with a non-zero exit, no target folder, the staging folder kept; then --resume
# finishes it bit-exact to an uninterrupted merge, keeping (not rewriting) what was already
# written and checked; a plain rerun keeps the staging folder, --restart discards it; Ctrl-C says
# how to continue. (2) a write that fails (ulimit -f) stops the merge with the file named.
# usage: kill_and_resume.sh VMERGE MPIEXEC SOURCE_DIR WORK
set -uo pipefail
vmerge=$1 mpiexec=$2 source_dir=$3 work=$4
example="$source_dir/examples/tiny-qwen2-fsdp/global_step_1/actor"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
args=(--local_dir "$example" --max-shard-size 1MB --max-memory 1MiB)

# The uninterrupted result to compare with.
"$mpiexec" --oversubscribe -np 4 "$vmerge" merge "${args[@]}" --target_dir "$work/straight" --quiet ||
    fail "uninterrupted merge failed"

# (1) Kill a rank while the ranks are writing (each block is slowed down by the test hook).
target="$work/killed"
staging="$work/.killed.vmerge-staging"
VMERGE_TEST_BLOCK_DELAY_MS=150 "$mpiexec" --oversubscribe -np 4 "$vmerge" merge "${args[@]}" --target_dir "$target" \
    >"$work/killed.log" 2>&1 &
launcher=$!
for _ in $(seq 1 200); do
    lines=$(cat "$staging"/.vmerge-journal/rank-* 2>/dev/null | wc -l)
    [[ $lines -ge 4 ]] && break
    sleep 0.05
done
[[ ${lines:-0} -ge 4 ]] || fail "the merge never started writing"
victim=$(pgrep -f "vmerge-mpi merge .*--target_dir $target" | sed -n 2p)
[[ -n $victim ]] || fail "no rank process to kill"
killed_at=$(date +%s)
kill -9 "$victim"
wait "$launcher"
rc=$?
took=$(( $(date +%s) - killed_at ))
cat "$work/killed.log"
[[ $rc -ne 0 ]] || fail "mpirun exited 0 after a rank was killed"
[[ $took -le 20 ]] || fail "the other ranks took ${took}s to stop"
grep -qiE "signal 9|killed" "$work/killed.log" || fail "the launcher does not say which rank died and why"
[[ ! -e $target ]] || fail "a killed merge left $target"
[[ -d $staging ]] || fail "the staging folder was not kept for --resume"
echo "ok   killed rank $victim: all ranks stopped in ${took}s, exit $rc, no target, staging kept"

# Resuming with another rank count is refused before anything is written, and the staging
# folder stays usable.
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge "${args[@]}" --target_dir "$target" --resume >"$work/np2.log" 2>&1 &&
    fail "resumed a 4-rank merge with 2 ranks"
grep -q "resume with the same" "$work/np2.log" || { cat "$work/np2.log"; fail "no clear message for another rank count"; }
echo "ok   resuming with another rank count is refused"

# Resume with the same plan: finished blocks are checked and kept, the rest written.
"$mpiexec" --oversubscribe -np 4 "$vmerge" merge "${args[@]}" --target_dir "$target" --resume >"$work/resume.log" 2>&1 ||
    { cat "$work/resume.log"; fail "resume failed"; }
cat "$work/resume.log"
kept=$(sed -n 's/.*resumed: \(.*\) written by the interrupted run.*/\1/p' "$work/resume.log")
[[ -n $kept && $kept != "0 B" ]] || fail "resume rewrote everything (nothing kept)"
for f in "$work/straight"/*.safetensors; do
    cmp "$f" "$target/$(basename "$f")" || fail "resumed $(basename "$f") differs from the uninterrupted merge"
done
"$vmerge" verify --target_dir "$target" >/dev/null || fail "verify failed on the resumed output"
[[ ! -e $staging ]] || fail "staging left after a successful resume"
echo "ok   resumed: kept $kept, output bit-exact to the uninterrupted merge"

# A resume under another plan is refused.
VMERGE_TEST_BLOCK_DELAY_MS=1000 timeout 3 "$mpiexec" --oversubscribe -np 2 "$vmerge" merge "${args[@]}" \
    --target_dir "$work/other" >/dev/null 2>&1
# mpirun can return before its ranks have finished dying; until they have, their lock rightly
# says a merge is running, so wait for them (at most 20 s).
for _ in $(seq 1 200); do
    pgrep -f "vmerge-mpi merge .*--target_dir $work/other" >/dev/null || break
    sleep 0.1
done
[[ -d $work/.other.vmerge-staging && ! -e $work/other ]] || fail "the interrupted merge did not leave a staging folder"
"$vmerge" merge --local_dir "$example" --target_dir "$work/other" --resume --max-shard-size 2MB >"$work/other.log" 2>&1 &&
    fail "resumed a staging folder of a different plan"
grep -q "different merge" "$work/other.log" || { cat "$work/other.log"; fail "no clear message for a different plan"; }
echo "ok   a different plan is refused"

# A plain rerun keeps the interrupted merge's staging folder and says how to go on; --restart
# discards it and merges from the start.
"$vmerge" merge --local_dir "$example" --target_dir "$work/other" >"$work/rerun.log" 2>&1 &&
    fail "a plain rerun went past an interrupted merge's staging folder"
grep -q -- "rerun with --resume to continue it" "$work/rerun.log" || { cat "$work/rerun.log"; fail "no --resume/--restart hint"; }
[[ -d $work/.other.vmerge-staging ]] || fail "a plain rerun discarded the staging folder"
"$vmerge" merge --local_dir "$example" --target_dir "$work/other" --restart >"$work/restart.log" 2>&1 ||
    { cat "$work/restart.log"; fail "--restart failed"; }
grep -q "discarded the staging folder" "$work/restart.log" || { cat "$work/restart.log"; fail "--restart did not say what it discarded"; }
echo "ok   a plain rerun keeps the staging folder; --restart discards it"

# Ctrl-C (SIGINT) mid-copy: the message says where the unfinished output is kept and how to
# continue it; the staging folder stays.
VMERGE_TEST_BLOCK_DELAY_MS=1000 timeout -s INT 3 "$vmerge" merge "${args[@]}" --target_dir "$work/ctrlc" \
    >"$work/ctrlc.log" 2>&1 && fail "an interrupted merge exited 0"
grep -q "interrupted; the unfinished output is kept in $work/.ctrlc.vmerge-staging; rerun the same command with --resume" \
    "$work/ctrlc.log" || { cat "$work/ctrlc.log"; fail "Ctrl-C did not say how to continue"; }
[[ -d $work/.ctrlc.vmerge-staging && ! -e $work/ctrlc ]] || fail "Ctrl-C did not keep the staging folder"
echo "ok   Ctrl-C names the kept staging folder and --resume"

# (2) A write that fails: a 256 KiB file-size limit on the ranks (not on mpirun, whose
# shared-memory segments need more), output files of about 1 MB.
"$mpiexec" --oversubscribe -np 2 bash -c 'ulimit -f 256; exec "$0" "$@"' "$vmerge" merge "${args[@]}" \
    --target_dir "$work/full" >"$work/full.log" 2>&1 && fail "a merge over the file-size limit succeeded"
cat "$work/full.log"
grep -q "File too large" "$work/full.log" || fail "the write error is not reported"
grep -q "safetensors" "$work/full.log" || fail "the message does not name the file"
[[ ! -e $work/full ]] || fail "a failed write left a target"
echo "ok   write failure reported, no target"
rm -rf "$work"
