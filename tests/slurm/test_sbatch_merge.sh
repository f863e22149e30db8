#!/bin/bash
# Runs slurm/vmerge.sbatch on a real (private, single-node) Slurm started for the test:
#   1. `sbatch --ntasks 3 slurm/vmerge.sbatch merge ...` on the FSDP fixture w3_uneven with the
#      default launcher (srun --mpi=pmix where Slurm has PMIx): must end COMPLETED 0:0, merge
#      with 3 ranks, bit for bit equal to the reference (tests/tools/check_hf_output.py), with
#      the job log copied to <target>.vmerge-<jobid>.log;
#   2. the same with VMERGE_LAUNCHER=mpirun and VMERGE_MAX_MEMORY (the fallback launcher);
#   3. a merge of a missing --local_dir: must end FAILED with vmerge's error in the log, the
#      log next to the target and no target folder.
# Slurm is always stopped at the end; on a failure the Slurm daemons' logs are printed.
# usage: test_sbatch_merge.sh VMERGE_DIR FIXTURES WORK [VMERGE_BIN]
#   VMERGE_DIR: the source tree (slurm/, tests/); FIXTURES: made by
#   tests/fixtures/make_fsdp_fixtures.py; VMERGE_BIN default: VMERGE_DIR/build/vmerge-mpi.
# Environment: VMERGE_SLURM_JOB_TIMEOUT (seconds to wait for the jobs, default 180),
# VMERGE_TEST_PYTHON (default /usr/bin/python3), and start_slurm.sh's knobs. Exits 77 (skipped)
# when not run as root.
set -uo pipefail
[[ $# -ge 3 && $# -le 4 ]] || { echo "usage: $0 VMERGE_DIR FIXTURES WORK [VMERGE_BIN]" >&2; exit 2; }
src=$(cd "$1" && pwd) fixtures=$(cd "$2" && pwd) || exit 2
mkdir -p "$3" && work=$(cd "$3" && pwd -P) || exit 2
bin=${4:-${VMERGE_BIN:-$src/build/vmerge-mpi}}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
python=${VMERGE_TEST_PYTHON:-/usr/bin/python3}
job_timeout=${VMERGE_SLURM_JOB_TIMEOUT:-180}
case_name=w3_uneven
slurm_dir=$work/slurm
PATH=$PATH:/usr/sbin:/sbin

if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: the private Slurm needs root (slurmd starts the jobs)"
    exit 77
fi
# A caller inside a Slurm job, or with SBATCH_PARTITION and friends set, must not steer our jobs.
while read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(SBATCH|SLURM|SRUN|SALLOC|SQUEUE|SINFO)_')
for tool in sbatch scontrol squeue slurmctld slurmd munged; do
    command -v "$tool" >/dev/null ||
        { echo "FAIL: $tool not found; run scripts/install-deps.sh --tests" >&2; exit 1; }
done
[[ -x $bin ]] || { echo "FAIL: $bin is not built" >&2; exit 1; }
[[ -f $fixtures/cases.json ]] || { echo "FAIL: no $fixtures/cases.json (generate the FSDP fixtures)" >&2; exit 1; }

started=$SECONDS
failed=0
fail() { echo "FAIL: $*"; failed=1; }

dump_slurm_logs() {
    echo "===== diagnostics ($slurm_dir/log)"
    [[ -n ${SLURM_CONF:-} ]] && { sinfo -N -l 2>&1; squeue -a 2>&1; } | sed 's/^/  /'
    local f
    for f in "$slurm_dir"/log/jobcomp.txt "$slurm_dir"/log/slurmctld.log "$slurm_dir"/log/slurmd.log \
             "$slurm_dir"/log/munged.log; do
        [[ -f $f ]] || continue
        echo "----- $f (last 80 lines)"
        tail -n 80 "$f"
    done
}
cleanup() {
    local rc=$?
    ((rc != 0 || failed)) && dump_slurm_logs
    "$src/tests/slurm/stop_slurm.sh" "$slurm_dir"
    echo "test_sbatch_merge: $( ((rc == 0 && !failed)) && echo passed || echo FAILED) in $((SECONDS - started)) s"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the case ----------------------------------------------------------------------------------
eval "$("$python" - "$fixtures/cases.json" "$case_name" <<'PY'
import json, shlex, sys
c = json.load(open(sys.argv[1]))[sys.argv[2]]
name = sys.argv[2]
print("local_dir=" + shlex.quote(c.get("local_dir", name)))
print("hf_config=" + shlex.quote(c.get("hf_config") or ""))
print("reference=" + shlex.quote(c.get("reference", name + ".reference")))
print("merge_args=(" + " ".join(shlex.quote(a) for a in c.get("merge_args", [])) + ")")
PY
)" || { echo "FAIL: cannot read $case_name from $fixtures/cases.json"; exit 1; }
local_dir=$fixtures/$local_dir
reference=$fixtures/$reference
hf_dir=$local_dir/huggingface
if [[ -n $hf_config ]]; then
    merge_args+=(--hf_config "$fixtures/$hf_config")
    hf_dir=$fixtures/$hf_config
fi

# --- Slurm ---------------------------------------------------------------------------------------
"$src/tests/slurm/start_slurm.sh" "$slurm_dir" || { echo "FAIL: Slurm did not start"; exit 1; }
source "$slurm_dir/env.sh"

out=$work/out
rm -rf "$out"
mkdir -p "$out"
submit() {  # NAME [env assignments --] sbatch-args...; prints the job id
    local name=$1; shift
    local envs=()
    while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" sbatch --parsable --job-name="vmerge-$name" --output="$out/$name-%j.out" \
        --time=5 --chdir="$out" "$@" | cut -d';' -f1
}
ok_target=$out/$case_name.np3
mpirun_target=$out/$case_name.mpirun
missing_target=$out/missing.np3
job_ok=$(submit ok VMERGE_BIN="$bin" -- --ntasks 3 "$src/slurm/vmerge.sbatch" \
    merge --local_dir "$local_dir" --target_dir "$ok_target" "${merge_args[@]}" --max-shard-size 40KB)
job_mpirun=$(submit mpirun VMERGE_BIN="$bin" VMERGE_LAUNCHER=mpirun VMERGE_MAX_MEMORY=4MiB -- --ntasks 3 \
    "$src/slurm/vmerge.sbatch" merge --local_dir "$local_dir" --target_dir "$mpirun_target" "${merge_args[@]}")
job_missing=$(submit missing VMERGE_BIN="$bin" -- --ntasks 3 "$src/slurm/vmerge.sbatch" \
    merge --local_dir "$work/no-such-checkpoint/actor" --target_dir "$missing_target")
# 4. slurm/vmerge-watch.sbatch --once over a run folder holding the case as global_step_1 and,
# unchanged, as global_step_2 (merged reusing step 1: its files hard-linked).
run=$work/run
rm -rf "$run" && mkdir -p "$run/global_step_1" "$run/global_step_2" && cp -r "$local_dir" "$run/global_step_1/actor" &&
    cp -r "$local_dir" "$run/global_step_2/actor" && printf 2 > "$run/latest_checkpointed_iteration.txt"
job_watch=$(submit watch VMERGE_BIN="$bin" VMERGE_SBATCH="$src/slurm/vmerge.sbatch" -- --ntasks 3 \
    "$src/slurm/vmerge-watch.sbatch" --root "$run" --target_root "$out/watch" "${merge_args[@]}" --once)
for id in "$job_ok" "$job_mpirun" "$job_missing" "$job_watch"; do
    [[ $id =~ ^[0-9]+$ ]] || { echo "FAIL: sbatch did not return a job id (got '$id')"; exit 1; }
done
echo "submitted after $((SECONDS - started)) s: ok=$job_ok mpirun=$job_mpirun missing=$job_missing"

# --- wait ----------------------------------------------------------------------------------------
job_field() {  # JOBID FIELD: from `scontrol show job`, or jobcomp.txt once the record is gone
    local line
    line=$(scontrol show job -o "$1" 2>/dev/null)
    [[ -n $line ]] || line=$(grep "JobId=$1 " "$slurm_dir/log/jobcomp.txt" 2>/dev/null | tail -1)
    sed -n "s/.*[[:space:]]$2=\([^[:space:]]*\).*/\1/p; s/^$2=\([^[:space:]]*\).*/\1/p" <<<"$line" | head -1
}
terminal() { [[ $1 =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) ]]; }
deadline=$((SECONDS + job_timeout))
while :; do
    pending=0
    for id in "$job_ok" "$job_mpirun" "$job_missing" "$job_watch"; do
        terminal "$(job_field "$id" JobState)" || pending=1
    done
    ((pending)) || break
    if ((SECONDS >= deadline)); then
        fail "jobs not finished after ${job_timeout}s"
        for id in "$job_ok" "$job_mpirun" "$job_missing" "$job_watch"; do scontrol show job "$id"; done
        scancel "$job_ok" "$job_mpirun" "$job_missing" "$job_watch" 2>/dev/null
        break
    fi
    sleep 0.5
done
echo "jobs ended after $((SECONDS - started)) s"

show_log() {  # NAME JOBID
    local f=$out/$1-$2.out
    echo "----- job log $f"
    cat "$f" 2>/dev/null || echo "(missing)"
}

# --- 1. the merge with the default launcher ----------------------------------------------------
check_ok() {  # NAME JOBID TARGET
    local name=$1 id=$2 target=$3 state code jlog=$out/$1-$2.out
    state=$(job_field "$id" JobState) code=$(job_field "$id" ExitCode)
    echo "job $id ($name): $state, exit $code"
    local before=$failed
    [[ $state == COMPLETED && $code == 0:0 ]] || fail "$name: job ended $state $code, expected COMPLETED 0:0"
    grep -q "with 3 ranks" "$jlog" 2>/dev/null || fail "$name: the log does not say 'with 3 ranks'"
    if [[ -d $target ]]; then
        local hf=()
        [[ -d $hf_dir ]] && hf=(--hf "$hf_dir")
        "$python" "$src/tests/tools/check_hf_output.py" --out "$target" --ref "$reference" "${hf[@]}" ||
            fail "$name: $target differs from $reference"
        "$bin" verify --target_dir "$target" >/dev/null || fail "$name: vmerge-mpi verify rejects $target"
    else
        fail "$name: no target folder $target"
    fi
    local copy=$target.vmerge-$id.log
    if [[ -f $copy ]]; then
        grep -q "vmerge: merged" "$copy" || fail "$name: $copy lacks vmerge's summary line"
    else
        fail "$name: no job log next to the target ($copy)"
    fi
    ((failed == before)) || show_log "$name" "$id"
}
check_ok ok "$job_ok" "$ok_target"
grep -m1 "launcher" "$out/ok-$job_ok.out" 2>/dev/null
check_ok mpirun "$job_mpirun" "$mpirun_target"
grep -q "launcher mpirun" "$out/mpirun-$job_mpirun.out" 2>/dev/null || fail "mpirun: the log does not say 'launcher mpirun'"
grep -q -- "--max-memory 4MiB" "$out/mpirun-$job_mpirun.out" 2>/dev/null || fail "mpirun: --max-memory not passed"

# --- 3. the merge that must fail ---------------------------------------------------------------
state=$(job_field "$job_missing" JobState) code=$(job_field "$job_missing" ExitCode)
echo "job $job_missing (missing local_dir): $state, exit $code"
before=$failed
[[ $state == FAILED && $code != 0:0 ]] || fail "missing: job ended $state $code, expected FAILED"
grep -q "vmerge-mpi: error: .*no-such-checkpoint/actor" "$out/missing-$job_missing.out" 2>/dev/null ||
    fail "missing: vmerge's error naming the missing folder is not in the log"
[[ ! -e $missing_target ]] || fail "missing: $missing_target was created"
compgen -G "$out/.missing.np3.vmerge-staging*" >/dev/null && fail "missing: a staging folder was left"
[[ -f $missing_target.vmerge-$job_missing.log ]] || fail "missing: no job log next to the target"
((failed == before)) || show_log missing "$job_missing"

# --- 4. the watcher -----------------------------------------------------------------------------
state=$(job_field "$job_watch" JobState) code=$(job_field "$job_watch" ExitCode)
echo "job $job_watch (watch --once): $state, exit $code"
before=$failed
[[ $state == COMPLETED && $code == 0:0 ]] || fail "watch: job ended $state $code, expected COMPLETED 0:0"
grep -q "with 3 ranks" "$out/watch-$job_watch.out" 2>/dev/null || fail "watch: the log does not say 'with 3 ranks'"
for step in global_step_1 global_step_2; do
    "$python" "$src/tests/tools/check_hf_output.py" --out "$out/watch/$step" --ref "$reference" ||
        fail "watch: $out/watch/$step differs from $reference"
done
for f in "$out"/watch/global_step_1/*.safetensors; do
    [[ $(stat -c %i "$f") == $(stat -c %i "$out/watch/global_step_2/${f##*/}") ]] ||
        fail "watch: ${f##*/} of the unchanged step 2 is not linked from step 1"
done
((failed == before)) || show_log watch "$job_watch"

((failed == 0)) || exit 1
rm -rf "$out" "$run"
exit 0
