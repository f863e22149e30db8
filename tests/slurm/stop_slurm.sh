#!/bin/bash
# Stops the daemons tests/slurm/start_slurm.sh WORKDIR started: it cancels the jobs still on
# that private cluster, then ends slurmd, slurmctld and munged by the process ids recorded in
# WORKDIR/pids (each checked to still be that program), SIGTERM first, SIGKILL after 10 s.
# Nothing else is touched. Safe to run twice or when nothing was started.
set -uo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
work=$(cd "$1" 2>/dev/null && pwd -P) || exit 0
[[ -f $work/pids || -f $work/runtime_dir ]] || exit 0
[[ -f $work/pids ]] || : >"$work/pids"
PATH=$PATH:/usr/sbin:/sbin

is_ours() {  # NAME PID: PID is alive (not a zombie) and runs NAME
    local name=$1 pid=$2 stat
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# Running jobs first, while slurmctld can still tell slurmd to end their steps.
if [[ -f $work/etc/slurm.conf ]] && grep -q '^slurmctld ' "$work/pids"; then
    read -r _ ctld_pid < <(grep '^slurmctld ' "$work/pids")
    if is_ours slurmctld "$ctld_pid"; then
        SLURM_CONF=$work/etc/slurm.conf timeout 10 scancel --full --quiet --user=root 2>/dev/null
        for _ in $(seq 20); do
            [[ -z $(SLURM_CONF=$work/etc/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
            sleep 0.5
        done
    fi
fi

for name in slurmd slurmctld munged; do
    while read -r n pid; do
        [[ $n == "$name" ]] || continue
        is_ours "$name" "$pid" || continue
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do
            is_ours "$name" "$pid" || break
            sleep 0.1
        done
        if is_ours "$name" "$pid"; then
            echo "stop_slurm.sh: $name ($pid) ignored SIGTERM, killing it" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
    done <"$work/pids"
done
rm -f "$work/pids"
if [[ -f $work/runtime_dir ]]; then
    run=$(cat "$work/runtime_dir")
    [[ $run == /tmp/vmslurm.* && -d $run ]] && rm -rf -- "$run"
    rm -f "$work/runtime_dir"
fi
exit 0
