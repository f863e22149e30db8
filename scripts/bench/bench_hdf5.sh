#!/bin/bash
# HDF5 archive output against the safetensors merge of the same generated verl FSDP checkpoint:
# write time (1 and NP ranks), with and without zstd, the bytes on disk and the compression ratio
# per dtype (inspect --backend hdf5), and the archive -> HF round trip.
#
#   bash scripts/bench/bench_hdf5.sh [SIZE_GB] [WORLD]      (defaults: 2 GB, W=8)
#
# Environment: BENCH_DIR (default /tmp/vmerge-bench-hdf5; about 3*SIZE_GB of disk, removed at the
# end unless KEEP=1), NP (default 2), REPS (default 3, median reported), LEVEL (zstd level, default 3),
# BENCH_WAIT_S (longest wait for CI jobs to finish, default 900). Page cache dropped before every
# run (bench_lib.sh). Needs build/vmerge-mpi (bash scripts/build.sh), /usr/bin/python3 with torch.
set -euo pipefail
SIZE_GB=${1:-2}
WORLD=${2:-8}
LEVEL=${LEVEL:-3}
BENCH_DIR=${BENCH_DIR:-/tmp/vmerge-bench-hdf5}
source "$(dirname "$0")/bench_lib.sh"
CKPT=$BENCH_DIR/actor
OUT=$BENCH_DIR/out
fresh_log "$BENCH_DIR/logs" "$OUT" "$OUT.hf"
reuse_or_generate "$BENCH_DIR/actor.params" "size_gb=$SIZE_GB world=$WORLD" "$CKPT" \
    "$PY" scripts/bench/make_bench_checkpoint.py "$CKPT" --size-gb "$SIZE_GB" --world "$WORLD"
IN_BYTES=$(find "$CKPT" -maxdepth 1 -name 'model_world_size_*_rank_*.pt' -printf '%s\n' |
           awk '{s+=$1} END {printf "%d", s}')
make_rankwrap
wait_for_idle
snapshot_vmerge

declare -A SIZE H5SIZE STORED
SIZED=()
sized_run() {  # sized_run NAME ARGS...: run, then record the folder's, model.h5's and the chunks' bytes
    local name=$1; shift
    CLEAN=$OUT run "$name" "$@"
    SIZED+=("$name")
    SIZE[$name]=$(du -sb "$OUT" | awk '{print $1}')
    if [ -f "$OUT/model.h5" ]; then
        H5SIZE[$name]=$(stat -c %s "$OUT/model.h5")
        STORED[$name]=$("$VMERGE" inspect --backend hdf5 --local_dir "$OUT" --json | jq .stored_bytes)
    fi
}
mpi=(mpirun --oversubscribe -np "$NP" "$RANKWRAP")
merge=(merge --local_dir "$CKPT" --target_dir "$OUT" --force -q)
sized_run "safetensors, 1 rank" "$VMERGE" "${merge[@]}"
sized_run "safetensors, np $NP" "${mpi[@]}" "$VMERGE" "${merge[@]}"
sized_run "hdf5, 1 rank" "$VMERGE" "${merge[@]}" --format hdf5
sized_run "hdf5, np $NP" "${mpi[@]}" "$VMERGE" "${merge[@]}" --format hdf5
sized_run "hdf5 zstd:$LEVEL, 1 rank" "$VMERGE" "${merge[@]}" --format hdf5 --compress "zstd:$LEVEL"
sized_run "hdf5 zstd:$LEVEL, np $NP" "${mpi[@]}" "$VMERGE" "${merge[@]}" --format hdf5 --compress "zstd:$LEVEL"
# $OUT now holds the compressed archive: what inspect says, then the way back.
"$VMERGE" inspect --backend hdf5 --local_dir "$OUT" | tee "$LOG/inspect.txt"
mv "$OUT" "$OUT.archive"
CLEAN=$OUT run "zstd:$LEVEL archive -> HF, 1 rank" "$VMERGE" merge --backend hdf5 --local_dir "$OUT.archive" \
    --target_dir "$OUT" --force -q
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$OUT"

echo
echo "checkpoint: $CKPT, W=$WORLD, input $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.3f", b/1e9}') GB; output bf16"
machine_line
echo "page cache dropped before every run: $DROPPED; wall = median of $REPS runs (min-max)"
echo
print_table
echo
echo "| output | folder bytes | vs safetensors | model.h5 bytes | tensor bytes stored (inspect) |"
echo "|---|---:|---:|---:|---:|"
for name in "${SIZED[@]}"; do
    awk -v n="$name" -v s="${SIZE[$name]}" -v b="${SIZE["safetensors, 1 rank"]}" -v h="${H5SIZE[$name]:--}" \
        -v t="${STORED[$name]:--}" 'BEGIN {printf "| %s | %d | %.3f | %s | %s |\n", n, s, s / b, h, t}'
done
rm -rf "$OUT" "$OUT.archive"
drop_snapshot
[ "${KEEP:-0}" = 1 ] || rm -rf "$CKPT" "$BENCH_DIR/actor.params"
