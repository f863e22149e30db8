#!/bin/bash
# What the FP8 and 4-bit float schemes cost against a plain merge of the same checkpoint
# (docs/quantization.md, "Cost"): one rank, the inputs warm (read once before the rounds), the
# outputs on tmpfs, so the difference is the quantizer's CPU time. Each round runs plain,
# --quantize=fp8 (also with --scale_format ue8m0), --quantize=fp8-block, --quantize=fp8-dynamic,
# --quantize=nvfp4 and --quantize=mxfp4 in an order that
# rotates, so drift in the machine's load hits all of them alike; the table gives the median wall and CPU (user + sys) seconds with min-max, and
# the median of the per-round ratios to the plain merge.
#
#   bash scripts/bench/bench_fp8.sh [SIZE_GB] [WORLD]      (defaults: 1 GB, W=2, fp32 masters)
#
# Environment: PAIRS (rounds, default 5), OUT_DIR (default /dev/shm/vmerge-bench-fp8), BENCH_DIR.
set -euo pipefail
SIZE_GB=${1:-1}
WORLD=${2:-2}
PAIRS=${PAIRS:-5}
source "$(dirname "$0")/bench_lib.sh"
CKPT=$BENCH_DIR/fp8-actor
OUT_DIR=${OUT_DIR:-/dev/shm/vmerge-bench-fp8}
LOG=$BENCH_DIR/fp8-logs
rm -rf "$LOG" "$OUT_DIR"
mkdir -p "$LOG" "$OUT_DIR"
reuse_or_generate "$BENCH_DIR/fp8-actor.params" "size_gb=$SIZE_GB world=$WORLD" "$CKPT" \
    "$PY" scripts/bench/make_bench_checkpoint.py "$CKPT" --size-gb "$SIZE_GB" --world "$WORLD"
snapshot_vmerge
cat "$CKPT"/*.pt >/dev/null  # warm

declare -A FLAGS=([plain]="" [fp8]="--quantize=fp8" [fp8-ue8m0]="--quantize=fp8 --scale_format ue8m0"
                  [fp8-block]="--quantize=fp8-block" [fp8-dynamic]="--quantize=fp8-dynamic"
                  [nvfp4]="--quantize=nvfp4" [mxfp4]="--quantize=mxfp4")
schemes=(plain fp8 fp8-ue8m0 fp8-block fp8-dynamic nvfp4 mxfp4)
declare -A WALLS CPUS RATIOS
for round in $(seq 1 "$PAIRS"); do
    declare -A wall_of=()
    for k in "${!schemes[@]}"; do
        scheme=${schemes[$(((k + round) % ${#schemes[@]}))]}
        rm -rf "$OUT_DIR/$scheme"
        # shellcheck disable=SC2086
        /usr/bin/time -f "%e %U %S" -o "$LOG/$scheme.$round" \
            "$VMERGE" merge -q --local_dir "$CKPT" --target_dir "$OUT_DIR/$scheme" ${FLAGS[$scheme]}
        read -r wall user sys <"$LOG/$scheme.$round"
        WALLS[$scheme]+="$wall "
        CPUS[$scheme]+="$(echo "$user + $sys" | bc) "
        wall_of[$scheme]=$wall
    done
    for scheme in "${schemes[@]:1}"; do
        RATIOS[$scheme]+="$(echo "scale=3; ${wall_of[$scheme]} / ${wall_of[plain]}" | bc) "
    done
done

stats() {  # "median (min-max)" of the numbers in $1
    tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR]=$1} END {m = NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
        printf "%.2f (%.2f-%.2f)", m, v[1], v[NR]}'
}
machine_line
echo "checkpoint: $CKPT ($(du -shL "$CKPT" | cut -f1)), $PAIRS rounds, one rank, warm, output on $OUT_DIR"
printf '| %-12s | %-20s | %-20s | %-18s | %s |\n' scheme "wall s" "CPU s" "wall / plain" "output"
printf '|---|---|---|---|---|\n'
for scheme in "${schemes[@]}"; do
    ratio="-"
    [[ $scheme == plain ]] || ratio=$(stats "${RATIOS[$scheme]}")
    printf '| %-12s | %-20s | %-20s | %-18s | %s |\n' "$scheme" "$(stats "${WALLS[$scheme]}")" \
        "$(stats "${CPUS[$scheme]}")" "$ratio" "$(du -sh "$OUT_DIR/$scheme" | cut -f1)"
done
rm -rf "$OUT_DIR"
drop_snapshot
