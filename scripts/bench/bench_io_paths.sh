#!/bin/bash
# POSIX pwrite (vmerge's writer) against MPI-IO independent and collective writes, each in its
# own job with the page cache dropped before it, repeated and interleaved.
# usage: bench_io_paths.sh [SIZE_MIB=2048] [BLOCK_MIB=64] [REPS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
size=${1:-2048} block=${2:-64} reps=${3:-3}
bench=build/vmerge-io-bench
[[ -x $bench ]] || bash scripts/build.sh >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
file=${BENCH_DIR:-/tmp}/vmerge-io-bench.bin
echo "| path | ranks | seconds | GB/s |"
echo "|---|---:|---:|---:|"
for rep in $(seq 1 "$reps"); do
    for np in 1 2; do
        for path in pwrite write_at write_at_all; do
            sync
            echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
            sleep 1
            mpirun --oversubscribe -np "$np" "$bench" "$file" "$size" "$block" "$path"
        done
    done
done
rm -f "$file"
