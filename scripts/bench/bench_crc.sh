#!/bin/bash
# What the input CRC-32 costs: one-rank merges of a generated verl FSDP checkpoint, alternating
# with and without VMERGE_BENCH_SKIP_CRC=1 (warm page cache), medians of the wall time and of
# --log-json's crc_s (docs/performance.md, "What the input CRC-32 costs").
#
#   bash scripts/bench/bench_crc.sh [SIZE_GB] [REPS] [extra merge args, e.g. --dtype keep]
#
# BENCH_DIR (default /tmp/vmerge-bench-crc; about 3*SIZE_GB of disk) is removed unless KEEP=1.
set -euo pipefail
SIZE_GB=${1:-1.5}
REPS=${2:-5}
shift $(( $# < 2 ? $# : 2 ))
B=${BENCH_DIR:-/tmp/vmerge-bench-crc}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$B"
[ -d "$B/actor" ] || /usr/bin/python3 "$ROOT/scripts/bench/make_bench_checkpoint.py" "$B/actor" --size-gb "$SIZE_GB" --world 4
cp "$ROOT/build/vmerge-mpi" "$B/vmerge-mpi" && rm -rf "$B/share" && cp -r "$ROOT/build/share" "$B/share"
cat "$B"/actor/*.pt > /dev/null
: > "$B/results.txt"
for _ in $(seq "$REPS"); do
  for mode in crc nocrc; do
    rm -rf "$B/out"; sync
    if [ $mode = nocrc ]; then export VMERGE_BENCH_SKIP_CRC=1; else unset VMERGE_BENCH_SKIP_CRC; fi
    s=$(date +%s.%N)
    "$B/vmerge-mpi" merge --local_dir "$B/actor" --target_dir "$B/out" --quiet --log-json "$B/log.json" "$@" >/dev/null
    e=$(date +%s.%N)
    /usr/bin/python3 -c "import json; r = json.load(open('$B/log.json'))['per_rank'][0]; print('$mode', $e - $s, r['crc_s'])" >> "$B/results.txt"
  done
done
unset VMERGE_BENCH_SKIP_CRC
/usr/bin/python3 - "$B/results.txt" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
for mode in ("crc", "nocrc"):
    wall = [float(r[1]) for r in rows if r[0] == mode]
    crc = [float(r[2]) for r in rows if r[0] == mode]
    print(f"{mode:6} median wall {statistics.median(wall):.3f} s over {len(wall)} runs, median crc_s {statistics.median(crc):.3f} s")
PY
[ "${KEEP:-0}" = 1 ] || rm -rf "$B"
