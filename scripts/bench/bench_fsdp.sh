#!/bin/bash
# Benchmarks vmerge-mpi on one generated verl FSDP checkpoint against the copy floor and the
# Python way (verl's model merger: torch.load everything, torch.cat, one safetensors file).
#
#   bash scripts/bench/bench_fsdp.sh [SIZE_GB] [WORLD]      (defaults: 2 GB, W=8)
#
# Environment: BENCH_DIR (default /tmp/vmerge-bench; needs about 3*SIZE_GB of disk, removed at
# the end unless KEEP=1), NP (MPI ranks for the parallel row, default 2), REPS (runs per row,
# default 3; the median wall time is reported).
# The default run (2 GB, W=8, REPS=3) takes about 2.5 minutes on 2 cores.
# Every timed step runs under /usr/bin/time -v (wall clock, max RSS). Before each timed step
# the page cache is flushed (sync) and, if permitted, dropped (echo 3 > drop_caches), so each
# step reads its input from disk; the previous run's output is deleted before (not during) each
# timed run. vmerge fsyncs what it writes, so the cp and Python rows end
# with `sync` too: every row pays for getting its output onto the disk.
# For MPI runs, RSS is measured per rank (each rank under its own /usr/bin/time) and the
# largest is reported. MB/s = input bytes (sum of the rank files, 10^6 B) / wall seconds.
# Needs: build/vmerge-mpi (bash scripts/build.sh), /usr/bin/python3 with torch, mpirun.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
SIZE_GB=${1:-2}
WORLD=${2:-8}
NP=${NP:-2}
REPS=${REPS:-3}
BENCH_DIR=${BENCH_DIR:-/tmp/vmerge-bench}
VMERGE=$ROOT/build/vmerge-mpi
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

[ -x "$VMERGE" ] || { echo "build/vmerge-mpi missing: run bash scripts/build.sh" >&2; exit 1; }
mkdir -p "$BENCH_DIR"
CKPT=$BENCH_DIR/actor
LOG=$BENCH_DIR/logs
rm -rf "$LOG" "$BENCH_DIR/copy" "$BENCH_DIR/vmerge-out" "$BENCH_DIR/python-out"
mkdir -p "$LOG"

# ---- checkpoint (reused when it was made with the same parameters) ------------------------
PARAMS="size_gb=$SIZE_GB world=$WORLD"
if [ "$(cat "$BENCH_DIR/actor.params" 2>/dev/null)" != "$PARAMS" ] || [ ! -d "$CKPT" ]; then
    rm -f "$BENCH_DIR/actor.params"
    "$PY" scripts/bench/make_bench_checkpoint.py "$CKPT" --size-gb "$SIZE_GB" --world "$WORLD"
    echo "$PARAMS" > "$BENCH_DIR/actor.params"
else
    echo "reusing $CKPT ($PARAMS)"
fi
IN_BYTES=$(find "$CKPT" -maxdepth 1 -name 'model_world_size_*_rank_*.pt' -printf '%s\n' |
           awk '{s+=$1} END {printf "%d", s}')

# ---- helpers -----------------------------------------------------------------------------
DROPPED=no
drop_caches() {
    sync
    if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then DROPPED=yes; else DROPPED=no; fi
}

secs() {  # "Elapsed (wall clock) ... : [h:]m:ss.ss" from a time -v file -> seconds
    awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2, p, ":"); s=0;
                for (i=1; i<=n; i++) s = s*60 + p[i]; printf "%.2f", s}' "$1"
}
rss_mib() {  # largest "Maximum resident set size (kbytes)" over the given time -v files
    awk -F': ' '/Maximum resident set size/ {if ($2+0 > m) m = $2+0} END {printf "%.0f", m/1024}' "$@"
}

ROWS=()
# run NAME CMD... : REPS timed runs of CMD (before each: rm -rf of $CLEAN, sync, drop caches).
# Wall = median of the runs (min-max shown); RSS = largest over the runs (and, under mpirun,
# over the per-rank time files $LOG/NAME.i.rank*, written by rankwrap.sh via $RANKTIME).
run() {
    local name=$1; shift
    local walls=() rssfiles=() i
    echo "== $name: $*"
    for i in $(seq 1 "$REPS"); do
        if [ -n "${CLEAN:-}" ]; then rm -rf "$CLEAN"; fi
        drop_caches
        export RANKTIME="$LOG/$name.$i"
        if ! /usr/bin/time -v -o "$LOG/$name.$i.time" "$@" > "$LOG/$name.$i.out" 2>&1; then
            cat "$LOG/$name.$i.out" >&2; echo "step $name failed" >&2; exit 1
        fi
        walls+=("$(secs "$LOG/$name.$i.time")")
        if compgen -G "$LOG/$name.$i.rank*" > /dev/null; then
            rssfiles+=("$LOG/$name.$i".rank*)
        else
            rssfiles+=("$LOG/$name.$i.time")
        fi
        echo "   run $i: ${walls[-1]} s (caches dropped: $DROPPED) $(tail -n 1 "$LOG/$name.$i.out")"
    done
    local sorted wall range rss mbs
    sorted=$(printf '%s\n' "${walls[@]}" | sort -g)
    wall=$(echo "$sorted" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    range=$(echo "$sorted" | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "-" hi}')
    rss=$(rss_mib "${rssfiles[@]}")
    mbs=$(awk -v b="$IN_BYTES" -v s="$wall" 'BEGIN {printf "%.0f", (s > 0 ? b/1e6/s : 0)}')
    ROWS+=("| $name | $wall ($range) | $mbs | $rss |")
}

# per-rank /usr/bin/time wrapper for mpirun (rank from Open MPI's environment)
RANKWRAP=$LOG/rankwrap.sh
cat > "$RANKWRAP" <<'EOF'
#!/bin/bash
exec /usr/bin/time -v -o "$RANKTIME.rank${OMPI_COMM_WORLD_RANK:-0}" "$@"
EOF
chmod +x "$RANKWRAP"

OUT=$BENCH_DIR/vmerge-out
PYOUT=$BENCH_DIR/python-out

# ---- timed steps ---------------------------------------------------------------------------
CLEAN=$BENCH_DIR/copy run "cp -r + sync (copy floor)" \
    bash -c "cp -r '$CKPT' '$BENCH_DIR/copy' && sync"
rm -rf "$BENCH_DIR/copy"
CLEAN=$OUT run "vmerge-mpi, 1 rank" \
    "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q
CLEAN=$OUT run "vmerge-mpi, mpirun -np $NP" \
    mpirun --oversubscribe -np "$NP" "$RANKWRAP" "$VMERGE" merge --local_dir "$CKPT" \
    --target_dir "$OUT" --force -q
CLEAN=$OUT run "vmerge-mpi, 1 rank, --max-memory 64MiB" \
    "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force --max-memory 64MiB -q
CLEAN=$PYOUT run "python_merge.py (verl way) + sync" \
    bash -c "'$PY' scripts/bench/python_merge.py '$CKPT' '$PYOUT' && sync"

# ---- correctness ------------------------------------------------------------------------------
echo "== vmerge-mpi verify / test against the Python output"
"$VMERGE" verify --target_dir "$OUT"
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$PYOUT"

# ---- report --------------------------------------------------------------------------------
echo
echo "checkpoint: $CKPT, W=$WORLD, input $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.3f", b/1e9}') GB" \
     "($IN_BYTES bytes in $WORLD rank files), output bf16 $(du -sb "$OUT" | awk '{printf "%.3f", $1/1e9}') GB"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM," \
     "$(df -h "$BENCH_DIR" | awk 'NR==2 {print $1}') ($(df -h "$BENCH_DIR" | awk 'NR==2 {print $2}'))"
echo
echo "page cache dropped before every run: $DROPPED; wall = median of $REPS runs (min-max)"
echo
echo "| method | wall s | MB/s (input) | peak RSS MiB |"
echo "|---|---:|---:|---:|"
printf '%s\n' "${ROWS[@]}"

if [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$CKPT" "$BENCH_DIR/actor.params" "$OUT" "$PYOUT" "$BENCH_DIR/copy"
fi
