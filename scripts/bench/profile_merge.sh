#!/bin/bash
# Where a one-rank merge's time goes: warm and cold, output on tmpfs and on disk. For each
# setting, one run with --log-json (the executor's own timers: read, CRC, hash, cast, write),
# one under /usr/bin/time (CPU seconds in user space and in the kernel), one under `strace -c -f`
# (system calls per MiB, by call), and for warm tmpfs a `perf record` (the top symbols).
# Prints markdown tables for docs/performance.md.
#
#   bash scripts/bench/profile_merge.sh LOCAL_DIR [extra merge args...]
#
# LOCAL_DIR: e.g. /tmp/vmerge-bench/actor-bf16 (bench_alternating.sh BF16=1 writes it).
# Needs root for the cold runs (drop_caches), linux-perf and strace.
set -euo pipefail
CKPT=$(realpath "$1")
shift
EXTRA=("$@")
source "$(dirname "$0")/bench_lib.sh"
fresh_log "$BENCH_DIR/profile-logs"
snapshot_vmerge
wait_for_idle
IN_BYTES=$(find "$CKPT" -name '*.pt' -printf '%s\n' | awk '{s+=$1} END {print s}')
out_root() { [ "$1" = tmpfs ] && echo /dev/shm/vmerge-profile-out || echo "$BENCH_DIR/profile-out"; }
prepare() {
    rm -rf "$(out_root "$2")"
    sync
    if [ "$1" = cold ]; then drop_caches; else find "$CKPT" -type f -exec cat {} + > /dev/null; fi
}
merge() { "$VMERGE" merge --local_dir "$CKPT" --target_dir "$(out_root "$1")" -q "${EXTRA[@]+"${EXTRA[@]}"}" "${@:2}"; }
json() { jq -r "$2" "$1"; }

echo "checkpoint $CKPT: $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.2f GB", b/1e9}') of rank files; load: $BENCH_LOAD"
echo
echo "| setting | wall s | read s | CRC s | hash s | cast s | write s (writer thread) | user CPU s | kernel CPU s | system calls per MiB | pread/preadv | pwrite | fdatasync | sync_file_range |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for mode in warm cold; do
    for out in tmpfs disk; do
        prepare "$mode" "$out"
        merge "$out" --log-json "$LOG/$mode.$out.json"
        sync
        prepare "$mode" "$out"
        /usr/bin/time -f '%U %S' -o "$LOG/$mode.$out.cpu" "$VMERGE" merge --local_dir "$CKPT" \
            --target_dir "$(out_root "$out")" -q "${EXTRA[@]+"${EXTRA[@]}"}"
        prepare "$mode" "$out"
        strace -c -f -o "$LOG/$mode.$out.strace" "$VMERGE" merge --local_dir "$CKPT" \
            --target_dir "$(out_root "$out")" -q "${EXTRA[@]+"${EXTRA[@]}"}"
        calls() { awk -v c="$1" '$NF == c {print $4; found=1} END {if (!found) print 0}' "$LOG/$mode.$out.strace"; }
        total=$(awk '$NF == "total" {print $4}' "$LOG/$mode.$out.strace")
        j=$LOG/$mode.$out.json
        read -r user kernel < "$LOG/$mode.$out.cpu"
        printf '| %s, %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %.1f | %s | %s | %s | %s |\n' \
            "$mode" "$out" "$(json "$j" .wall_s)" "$(json "$j" '.per_rank[0].read_s')" "$(json "$j" '.per_rank[0].crc_s')" \
            "$(json "$j" '.per_rank[0].hash_s // 0')" "$(json "$j" '.per_rank[0].cast_s')" "$(json "$j" '.per_rank[0].write_s')" \
            "$user" "$kernel" "$(awk -v t="$total" -v b="$IN_BYTES" 'BEGIN {print t / (b / 1048576)}')" \
            "$(( $(calls pread64) + $(calls preadv) ))" "$(calls pwrite64)" "$(calls fdatasync)" "$(calls sync_file_range)"
    done
done
rm -rf "$(out_root tmpfs)" "$(out_root disk)"

echo
echo "Top symbols, warm, output on tmpfs (perf record):"
echo
prepare warm tmpfs
perf record -q -o "$LOG/perf.data" -- "$VMERGE" merge --local_dir "$CKPT" --target_dir "$(out_root tmpfs)" -q \
    "${EXTRA[@]+"${EXTRA[@]}"}" > /dev/null 2>&1
rm -rf "$(out_root tmpfs)"
echo "| share | symbol |"
echo "|---|---|"
perf report -i "$LOG/perf.data" --no-children --sort sym --stdio 2>/dev/null |
    awk '/^ +[0-9.]+%/ {printf "| %s | `%s` |\n", $1, $3 " " $4; if (++n == 10) exit}'
