#!/bin/bash
# Benchmarks vmerge-mpi on one generated verl FSDP checkpoint against the copy floor and the
# Python way (verl's model merger: torch.load of every rank file in a thread pool, torch.cat, one
# safetensors file), prints the ratios against the targets (vmerge <= 1.3x cp, Python >= 5x
# vmerge) and vmerge's own --log-json breakdown; then runs the Megatron tp=2 pp=2 benchmark
# (bench_megatron.sh) and, with BENCH_ZIP64=1, the ZIP64 check (bench_zip64.sh).
#
#   bash scripts/bench/bench_fsdp.sh [SIZE_GB] [WORLD]      (defaults: 2 GB, W=8)
#
# BENCH_MEGATRON=0 skips the Megatron part; BENCH_ZIP64=1 adds the > 4 GiB rank file of
# BENCH_ZIP64_GB GB (default 4.5; needs about 10 GB of disk and 14 GB of RAM at 4.5);
# BENCH_NOSYNC=0 drops the row that measures the journal's per-block fdatasync (vmerge with an
# LD_PRELOAD shim that makes fdatasync a no-op).
# Before the timed runs the script waits (up to BENCH_WAIT_S, default 900 s) until no CI job
# (ctest, run_fuzz, vmerge_unit_tests, cmake --build, cc1plus) is running, flags runs that ended
# with one running, and times a private copy of build/vmerge-mpi (a rebuild cannot hit it).
#
# Environment: BENCH_DIR (default /tmp/vmerge-bench; needs about 3*SIZE_GB of disk, removed at
# the end unless KEEP=1), NP (MPI ranks for the parallel row, default 2), REPS (runs per row,
# default 3; the median wall time is reported).
# The default run (2 GB, W=8, REPS=3, with the Megatron part) takes about 3.5 minutes on 2
# cores, 5 with BENCH_ZIP64=1.
# Every timed step runs under /usr/bin/time -v (wall clock, max RSS). Before each timed step
# the page cache is flushed (sync) and, if permitted, dropped (echo 3 > drop_caches), so each
# step reads its input from disk; the previous run's output is deleted before (not during) each
# timed run. vmerge fsyncs what it writes, so the cp and Python rows end
# with `sync` too: every row pays for getting its output onto the disk.
# For MPI runs, RSS is measured per rank (each rank under its own /usr/bin/time) and the
# largest is reported. MB/s = input bytes (sum of the rank files, 10^6 B) / wall seconds.
# Needs: build/vmerge-mpi (bash scripts/build.sh), /usr/bin/python3 with torch, mpirun.
set -euo pipefail
SIZE_GB=${1:-2}
WORLD=${2:-8}
source "$(dirname "$0")/bench_lib.sh"
CKPT=$BENCH_DIR/actor
fresh_log "$BENCH_DIR/logs" "$BENCH_DIR/copy" "$BENCH_DIR/vmerge-out" "$BENCH_DIR/python-out"

# ---- checkpoint (reused when it was made with the same parameters) ------------------------
reuse_or_generate "$BENCH_DIR/actor.params" "size_gb=$SIZE_GB world=$WORLD" "$CKPT" \
    "$PY" scripts/bench/make_bench_checkpoint.py "$CKPT" --size-gb "$SIZE_GB" --world "$WORLD"
IN_BYTES=$(find "$CKPT" -maxdepth 1 -name 'model_world_size_*_rank_*.pt' -printf '%s\n' |
           awk '{s+=$1} END {printf "%d", s}')

make_rankwrap
[ "${BENCH_NOSYNC:-1}" = 1 ] && make_no_fdatasync

OUT=$BENCH_DIR/vmerge-out
PYOUT=$BENCH_DIR/python-out

# ---- timed steps ---------------------------------------------------------------------------
wait_for_idle
snapshot_vmerge
CP="cp -r + sync (copy floor)"
V1="vmerge-mpi, 1 rank"
VN="vmerge-mpi, mpirun -np $NP"
VNS="vmerge-mpi, 1 rank, fdatasync disabled (LD_PRELOAD)"
V64="vmerge-mpi, 1 rank, --max-memory 64MiB"
PYN="python_merge.py (verl way, threads) + sync"
JSONLOG=$LOG/vmerge.json
CLEAN=$BENCH_DIR/copy run "$CP" \
    bash -c "cp -r '$CKPT' '$BENCH_DIR/copy' && sync"
rm -rf "$BENCH_DIR/copy"
CLEAN=$OUT run "$V1" \
    "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q --log-json "$JSONLOG"
CLEAN=$OUT run "$VN" \
    mpirun --oversubscribe -np "$NP" "$RANKWRAP" "$VMERGE" merge --local_dir "$CKPT" \
    --target_dir "$OUT" --force -q --log-json "$JSONLOG"
if [ -n "${NOSYNC_SO:-}" ]; then
    CLEAN=$OUT run "$VNS" \
        env LD_PRELOAD="$NOSYNC_SO" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q \
        --log-json "$JSONLOG"
fi
CLEAN=$OUT run "$V64" \
    "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force --max-memory 64MiB -q --log-json "$JSONLOG"
unset JSONLOG
CLEAN=$PYOUT run "$PYN" \
    bash -c "'$PY' scripts/bench/python_merge.py '$CKPT' '$PYOUT' && sync"

# ---- correctness ------------------------------------------------------------------------------
echo "== vmerge-mpi verify / test against the Python output"
"$VMERGE" verify --target_dir "$OUT"
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$PYOUT"

# ---- report --------------------------------------------------------------------------------
print_report "checkpoint: $CKPT, W=$WORLD, input $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.3f", b/1e9}') GB \
($IN_BYTES bytes in $WORLD rank files), output bf16 $(du -sb "$OUT" | awk '{printf "%.3f", $1/1e9}') GB"
merge_ratio_rows "$CP" "$V1" "$VN" "$VNS" "$PYN"
ratio_row "vmerge 64MiB RSS / Python RSS" "$V64" "$PYN" "-" - rss
print_vmerge_breakdowns "$V1" "$VNS" "$VN" "$NP"

if [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$CKPT" "$BENCH_DIR/actor.params" "$OUT" "$PYOUT" "$BENCH_DIR/copy"
fi

# ---- the other parts ---------------------------------------------------------------------------
if [ "${BENCH_MEGATRON:-1}" = 1 ]; then
    echo; echo "######## Megatron tp=2 pp=2"
    bash "$ROOT/scripts/bench/bench_megatron.sh" 1 2 2
fi
if [ "${BENCH_ZIP64:-0}" = 1 ]; then
    echo; echo "######## ZIP64: one rank file over 4 GiB"
    bash "$ROOT/scripts/bench/bench_zip64.sh" "${BENCH_ZIP64_GB:-4.5}"
fi
drop_snapshot
