#!/bin/bash
# Starts a private single-node Slurm (munged, slurmctld, slurmd) whose configuration, state,
# sockets and logs all live in WORKDIR, and waits until the node is idle. Installs nothing: the
# packages come from `scripts/install-deps.sh --tests` (slurmctld slurmd slurm-client munge).
# Must run as root (slurmd launches jobs). The last lines printed are the environment to
# source before using sbatch/squeue/scontrol against this cluster:
#     eval "$(tests/slurm/start_slurm.sh WORKDIR | grep '^export ')"
# or simply `source WORKDIR/env.sh`. tests/slurm/stop_slurm.sh WORKDIR stops what this started.
#
# Knobs (environment): VMERGE_SLURM_CPUS (CPUs the node claims, default max(8, 4 x cores): the
# fixtures are tiny, tests run more ranks than this machine has cores), VMERGE_SLURM_PORT
# (slurmctld port, default: a free one from 16817 up; slurmd uses the next one),
# VMERGE_SLURM_START_TIMEOUT (seconds to wait for the node, default 60).
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 WORKDIR" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "start_slurm.sh: must run as root" >&2; exit 2; }
for tool in munged slurmctld slurmd sinfo scontrol; do
    command -v "$tool" >/dev/null || PATH=$PATH:/usr/sbin:/sbin
    command -v "$tool" >/dev/null ||
        { echo "start_slurm.sh: $tool not found (scripts/install-deps.sh --tests installs it)" >&2; exit 2; }
done

mkdir -p "$1"
work=$(cd "$1" && pwd -P)
[[ $work != *[[:space:]]* ]] || { echo "start_slurm.sh: WORKDIR must not contain spaces" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# WORKDIR is wiped below: only an empty folder or one this script made before.
if [[ ! -f $work/.vmerge-slurm ]] && [[ -n $(ls -A "$work") ]] &&
    ! grep -qs 'written by tests/slurm/start_slurm.sh' "$work/etc/slurm.conf"; then
    echo "start_slurm.sh: $work is not empty and was not made by start_slurm.sh; give an empty folder" >&2
    exit 2
fi
touch "$work/.vmerge-slurm"

# Still running from an earlier start on this WORKDIR: stop that first, start clean.
"$here/stop_slurm.sh" "$work" || true
for old in munge state spool log etc env.sh pids runtime_dir; do
    rm -rf "${work:?}/$old"
done
mkdir -p "$work/state" "$work/log" "$work/etc"
: >"$work/pids"
up=0
trap '((up)) || "$here/stop_slurm.sh" "$work"' EXIT  # a failed start leaves nothing running
# Unix socket paths are limited to 107 bytes: under a deep WORKDIR the sockets (munged's, slurmd's
# and its job steps') go to a short folder in /tmp, which stop_slurm.sh removes.
run=$work
if ((${#work} > 60)); then
    run=$(mktemp -d /tmp/vmslurm.XXXXXX)
    chmod 0755 "$run"
    echo "$run" >"$work/runtime_dir"
fi
mkdir -p "$run/spool"

node=$(hostname -s)
cores=$(nproc)
cpus=${VMERGE_SLURM_CPUS:-$(( cores * 4 > 8 ? cores * 4 : 8 ))}
mem_mb=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
real_mem=$(( mem_mb * 9 / 10 ))

port_free() {  # PORT: nothing listens on it (TCP, v4 or v6)
    local hex
    hex=$(printf '%04X' "$1")
    ! awk -v h=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h {found = 1}
                        END {exit !found}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
if [[ -n ${VMERGE_SLURM_PORT:-} ]]; then
    ctld_port=$VMERGE_SLURM_PORT
else
    ctld_port=16817
    while ! port_free "$ctld_port" || ! port_free $((ctld_port + 1)); do
        ctld_port=$((ctld_port + 2))
        ((ctld_port < 17817)) || { echo "start_slurm.sh: no free port pair found" >&2; exit 1; }
    done
fi
slurmd_port=$((ctld_port + 1))

# munged: our own key, socket, pid and log, run as the munge user (as Debian's unit does).
munge_user=munge
id "$munge_user" >/dev/null 2>&1 || munge_user=root
munge_dir=$run/munge
mkdir -p "$munge_dir"
chmod 0755 "$munge_dir"
if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$munge_dir/munge.key" --force
else
    dd if=/dev/urandom bs=1 count=1024 of="$munge_dir/munge.key" status=none
fi
chmod 0600 "$munge_dir/munge.key"
chown -R "$munge_user:" "$munge_dir"
munge_socket=$munge_dir/munge.socket.2
munge_args=(--socket="$munge_socket" --key-file="$munge_dir/munge.key"
            --pid-file="$munge_dir/munged.pid" --log-file="$work/log/munged.log"
            --seed-file="$munge_dir/munged.seed")
touch "$work/log/munged.log"
chown "$munge_user:" "$work/log/munged.log"
if [[ $munge_user == root ]]; then
    munged "${munge_args[@]}" --force
else
    # munged refuses to trust a key whose folder is writable by others: $munge_dir is 0755.
    runuser -u "$munge_user" -- munged "${munge_args[@]}" --force
fi
for _ in $(seq 50); do
    [[ -S $munge_socket && -s $munge_dir/munged.pid ]] && break
    sleep 0.1
done
[[ -S $munge_socket ]] || { echo "start_slurm.sh: munged did not start" >&2; cat "$work/log/munged.log" >&2; exit 1; }
echo "munged $(cat "$munge_dir/munged.pid")" >>"$work/pids"
if command -v munge >/dev/null && command -v unmunge >/dev/null; then
    munge --socket="$munge_socket" -n | unmunge --socket="$munge_socket" >/dev/null ||
        { echo "start_slurm.sh: munge round trip failed" >&2; cat "$work/log/munged.log" >&2; exit 1; }
fi

conf=$work/etc/slurm.conf
cat >"$conf" <<EOF
# Private single-node test cluster written by tests/slurm/start_slurm.sh
ClusterName=vmergetest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$work/state
SlurmdSpoolDir=$run/spool/slurmd-%n
SlurmctldPidFile=$work/state/slurmctld.pid
SlurmdPidFile=$run/spool/slurmd-%n.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$work/log/jobcomp.txt
ReturnToService=2
MinJobAge=3600
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=100000
SlurmctldTimeout=60
SlurmdTimeout=60
InactiveLimit=0
MailProg=/bin/true
KillWait=5
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$conf

slurmctld -f "$conf" -i
for _ in $(seq 100); do
    [[ -s $work/state/slurmctld.pid ]] && break
    sleep 0.1
done
[[ -s $work/state/slurmctld.pid ]] || { echo "start_slurm.sh: slurmctld did not start" >&2;
    cat "$work/log/slurmctld.log" >&2 || true; exit 1; }
echo "slurmctld $(cat "$work/state/slurmctld.pid")" >>"$work/pids"

slurmd -f "$conf" -N "$node"
for _ in $(seq 100); do
    [[ -s $run/spool/slurmd-$node.pid ]] && break
    sleep 0.1
done
[[ -s $run/spool/slurmd-$node.pid ]] || { echo "start_slurm.sh: slurmd did not start" >&2;
    cat "$work/log/slurmd.log" >&2 || true; exit 1; }
echo "slurmd $(cat "$run/spool/slurmd-$node.pid")" >>"$work/pids"

timeout=${VMERGE_SLURM_START_TIMEOUT:-60}
deadline=$((SECONDS + timeout))
state=
while ((SECONDS < deadline)); do
    state=$(sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -1 || true)
    [[ $state == idle ]] && break
    # A node that came up "down"/"drained" from an earlier state: resume it.
    if [[ $state == down* || $state == drain* ]]; then
        scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true
    fi
    sleep 0.5
done
if [[ $state != idle ]]; then
    echo "start_slurm.sh: node $node is '${state:-unknown}' after ${timeout}s, not idle" >&2
    sinfo -N -l >&2 || true
    for f in slurmctld slurmd munged; do
        echo "----- $work/log/$f.log" >&2; tail -n 50 "$work/log/$f.log" >&2 || true
    done
    exit 1
fi

# shellcheck disable=SC2034  # read by the EXIT trap
up=1
cat >"$work/env.sh" <<EOF
export SLURM_CONF=$conf
export PATH=\$PATH:/usr/sbin
EOF
echo "slurm is up: node $node idle, $cpus CPUs, ${real_mem}MB, port $ctld_port; logs in $work/log"
cat "$work/env.sh"
