#!/bin/bash
# Benchmarks vmerge-mpi on one generated DeepSpeed ZeRO-3 checkpoint with Adam states against
# the Python way (python_merge_deepspeed.py: zero_to_fp32's algorithm on torch 1.13, which loads
# every optimizer file whole, concatenates, narrows and writes fp32 safetensors), and prints the
# ratios against the issue's targets: Python >= 5x vmerge's wall time with one rank, vmerge's
# peak RSS <= 1/10 of Python's. The fp32 row writes what the Python way writes (and is checked
# against it bit for bit); the default row writes config.json's bf16.
#
#   bash scripts/bench/bench_deepspeed.sh [SIZE_GB] [WORLD]      (defaults: 2 GB, W=4)
#
# SIZE_GB is the checkpoint's size (fp32 masters + exp_avg + exp_avg_sq, 12 bytes a parameter).
# Environment: BENCH_DIR (default /tmp/vmerge-bench; needs about 1.6 x SIZE_GB of disk, removed
# at the end unless KEEP=1), NP (ranks of the parallel row, default 2), REPS (runs per row,
# default 1 here; the median is reported). Each timed run starts with the page cache dropped
# when permitted; every row ends with its output synced. Needs build/vmerge-mpi, /usr/bin/python3
# with torch, mpirun.
set -euo pipefail
SIZE_GB=${1:-2}
WORLD=${2:-4}
REPS=${REPS:-1}
source "$(dirname "$0")/bench_lib.sh"
CKPT=$BENCH_DIR/zero3
OUT=$BENCH_DIR/vmerge-out
PYOUT=$BENCH_DIR/python-out
fresh_log "$BENCH_DIR/logs" "$OUT" "$PYOUT"

reuse_or_generate "$BENCH_DIR/zero3.params" "size_gb=$SIZE_GB world=$WORLD" "$CKPT" \
    "$PY" scripts/bench/make_bench_deepspeed.py "$CKPT" "$SIZE_GB" "$WORLD"
IN_BYTES=$(find "$CKPT" -name '*_states.pt' -printf '%s\n' | awk '{s+=$1} END {printf "%.0f", s}')  # %d stops at 2^31-1 in mawk
make_rankwrap

wait_for_idle
snapshot_vmerge
V1="vmerge-mpi, 1 rank (bf16, config dtype)"
VF="vmerge-mpi, 1 rank, --dtype fp32"
VN="vmerge-mpi, mpirun -np $NP, --dtype fp32"
V64="vmerge-mpi, 1 rank, --dtype fp32 --max-memory 64MiB"
PYN="python_merge_deepspeed.py (zero_to_fp32 way, fp32) + sync"
CLEAN=$OUT run "$V1" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q
CLEAN=$OUT run "$VF" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q --dtype fp32
CLEAN=$OUT run "$VN" mpirun --oversubscribe -np "$NP" "$RANKWRAP" "$VMERGE" merge --local_dir "$CKPT" \
    --target_dir "$OUT" --force -q --dtype fp32
CLEAN=$OUT run "$V64" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q --dtype fp32 --max-memory 64MiB
CLEAN=$PYOUT run "$PYN" bash -c "'$PY' scripts/bench/python_merge_deepspeed.py '$CKPT' '$PYOUT' && sync"

echo "== vmerge-mpi verify, and test (fp32) against the Python output"
"$VMERGE" verify --target_dir "$OUT"
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$PYOUT" --dtype fp32

print_report "checkpoint: $CKPT, ZeRO-3 W=$WORLD, input $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.3f", b/1e9}') GB \
($IN_BYTES bytes; a third fp32 masters, two thirds Adam moments), fp32 output \
$(du -sb "$PYOUT" | awk '{printf "%.3f", $1/1e9}') GB"
ratio_row "Python / vmerge 1 rank (both fp32)" "$PYN" "$VF" ">=" 5 wall
ratio_row "Python / vmerge np=$NP (both fp32)" "$PYN" "$VN" ">=" 5 wall
ratio_row "vmerge 1 rank fp32 RSS / Python RSS" "$VF" "$PYN" "<=" 0.1 rss
ratio_row "vmerge 64MiB RSS / Python RSS" "$V64" "$PYN" "<=" 0.1 rss

if [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$CKPT" "$BENCH_DIR/zero3.params" "$OUT" "$PYOUT"
fi
drop_snapshot
