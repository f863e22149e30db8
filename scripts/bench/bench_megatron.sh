#!/bin/bash
# Benchmarks vmerge-mpi on a generated verl Megatron legacy checkpoint (tp x pp per-rank model.pt)
# against the copy floor and a Python merge (torch.load + torch.cat by the TP rules + one
# safetensors file, python_merge_megatron.py).
#
#   bash scripts/bench/bench_megatron.sh [SIZE_GB] [TP] [PP]      (defaults: 1 GB, tp=2, pp=2)
#
# Environment as bench_fsdp.sh: BENCH_DIR (default /tmp/vmerge-bench; needs about 4*SIZE_GB),
# NP (ranks of the MPI row, default 2), REPS (default 3), KEEP=1 (keep the files), BENCH_WAIT_S,
# BENCH_NOSYNC=0 (drop the row with the journal's fdatasync disabled by an LD_PRELOAD shim).
# Same method as bench_fsdp.sh (page cache dropped before every run, cp and Python end with
# sync, median of REPS, per-rank RSS under mpirun). Correctness: `vmerge-mpi test` against the
# Python output and against the reference folder written by the generator from the unsplit
# Hugging Face tensors, both bit for bit.
set -euo pipefail
SIZE_GB=${1:-1}
TP=${2:-2}
PP=${3:-2}
source "$(dirname "$0")/bench_lib.sh"
MDIR=$BENCH_DIR/megatron
CKPT=$MDIR/actor
OUT=$BENCH_DIR/megatron-vmerge-out
PYOUT=$BENCH_DIR/megatron-python-out
fresh_log "$BENCH_DIR/logs-megatron" "$BENCH_DIR/megatron-copy" "$OUT" "$PYOUT"

reuse_or_generate "$BENCH_DIR/megatron.params" "size_gb=$SIZE_GB tp=$TP pp=$PP" "$CKPT" \
    "$PY" scripts/bench/make_bench_megatron.py "$MDIR" --size-gb "$SIZE_GB" --tp "$TP" --pp "$PP"
IN_BYTES=$(find "$CKPT/model" -name 'model.pt' -printf '%s\n' | awk '{s+=$1} END {printf "%d", s}')
make_rankwrap
[ "${BENCH_NOSYNC:-1}" = 1 ] && make_no_fdatasync
wait_for_idle
snapshot_vmerge

JSONLOG=$LOG/vmerge.json
CLEAN=$BENCH_DIR/megatron-copy run "cp -r + sync (copy floor)" \
    bash -c "cp -r '$CKPT' '$BENCH_DIR/megatron-copy' && sync"
rm -rf "$BENCH_DIR/megatron-copy"
V1="vmerge-mpi, 1 rank"
CLEAN=$OUT run "$V1" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force -q --log-json "$JSONLOG"
VN="vmerge-mpi, mpirun -np $NP"
CLEAN=$OUT run "$VN" mpirun --oversubscribe -np "$NP" "$RANKWRAP" "$VMERGE" merge --local_dir "$CKPT" \
    --target_dir "$OUT" --force -q --log-json "$JSONLOG"
VNS="vmerge-mpi, 1 rank, fdatasync disabled (LD_PRELOAD)"
if [ -n "${NOSYNC_SO:-}" ]; then
    CLEAN=$OUT run "$VNS" env LD_PRELOAD="$NOSYNC_SO" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" \
        --force -q --log-json "$JSONLOG"
fi
PYN="python_merge_megatron.py + sync"
CLEAN=$PYOUT run "$PYN" bash -c "'$PY' scripts/bench/python_merge_megatron.py '$CKPT' '$PYOUT' && sync"
unset JSONLOG

echo "== vmerge-mpi verify / test against the Python output and the generator's reference"
"$VMERGE" verify --target_dir "$OUT"
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$PYOUT"
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$MDIR/reference"

print_report "checkpoint: $CKPT, Megatron legacy tp=$TP pp=$PP, input $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.3f", b/1e9}') GB \
($IN_BYTES bytes in $((TP * PP)) model.pt), output bf16 $(du -sb "$OUT" | awk '{printf "%.3f", $1/1e9}') GB"
CP="cp -r + sync (copy floor)"
merge_ratio_rows "$CP" "$V1" "$VN" "$VNS" "$PYN"
ratio_row "vmerge np=$NP RSS (largest rank) / Python RSS" "$VN" "$PYN" "-" - rss
print_vmerge_breakdowns "$V1" "$VNS" "$VN" "$NP"

if [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$MDIR" "$BENCH_DIR/megatron.params" "$OUT" "$PYOUT" "$BENCH_DIR/megatron-copy"
fi
drop_snapshot
