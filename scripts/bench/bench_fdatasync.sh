#!/bin/bash
# What the write journal's per-block fdatasync costs: `vmerge-mpi merge` (1 rank) with and
# without it, interleaved (A B A B ...) so that drift of the shared disk hits both alike.
#
#   bash scripts/bench/bench_fdatasync.sh LOCAL_DIR [PAIRS]      (default 7 pairs)
#
# LOCAL_DIR: any checkpoint, e.g. one written by make_bench_checkpoint.py or
# make_bench_megatron.py (its actor/ folder). "without" = the same binary under an LD_PRELOAD
# shim that turns fdatasync() into a no-op; the final fsync of every output file stays, so both
# variants end with the output on disk. Page cache dropped before every run; output in
# BENCH_DIR (default /tmp/vmerge-bench), removed at the end.
set -euo pipefail
CKPT=$(realpath "$1")
PAIRS=${2:-7}
source "$(dirname "$0")/bench_lib.sh"
OUT=$BENCH_DIR/fdatasync-out
fresh_log "$BENCH_DIR/logs-fdatasync" "$OUT"
make_no_fdatasync
wait_for_idle
snapshot_vmerge

with=() without=()
for i in $(seq 1 "$PAIRS"); do
    for v in with without; do
        rm -rf "$OUT"
        drop_caches
        pre=()
        [ "$v" = without ] && pre=(env LD_PRELOAD="$NOSYNC_SO")
        /usr/bin/time -v -o "$LOG/$v.$i.time" "${pre[@]}" "$VMERGE" merge --local_dir "$CKPT" \
            --target_dir "$OUT" --force -q --log-json "$LOG/$v.$i.json"
        w=$(secs "$LOG/$v.$i.time")
        if [ "$v" = with ]; then with+=("$w"); else without+=("$w"); fi
        flag=""; pgrep -f "$CI_PATTERN" > /dev/null && flag=" [CI job running]"
        echo "pair $i $v fdatasync: $w s, writer busy $(jq '.per_rank[0].write_s*1000|round/1000' "$LOG/$v.$i.json") s$flag"
    done
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
diffs=()
for i in $(seq 0 $((PAIRS - 1))); do diffs+=("$(awk -v a="${with[$i]}" -v b="${without[$i]}" 'BEGIN {printf "%.2f", a-b}')"); done
echo
echo "checkpoint $CKPT, $PAIRS pairs; machine: $(nproc) cores, other load: ${BENCH_LOAD:-?}"
echo "| variant | median wall s | min-max |"
echo "|---|---:|---:|"
echo "| with fdatasync (default) | $(med "${with[@]}") | $(printf '%s\n' "${with[@]}" | sort -g | sed -n '1p;$p' | paste -sd-) |"
echo "| without (LD_PRELOAD no-op) | $(med "${without[@]}") | $(printf '%s\n' "${without[@]}" | sort -g | sed -n '1p;$p' | paste -sd-) |"
echo "| difference, median of the pairs | $(med "${diffs[@]}") | $(printf '%s\n' "${diffs[@]}" | sort -g | sed -n '1p;$p' | paste -sd' ') |"
rm -rf "$OUT"
drop_snapshot
