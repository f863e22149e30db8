#!/bin/bash
# Fair, alternating comparison of vmerge-mpi against the copy floor (cp of the same input files)
# and the Python way (scripts/bench/python_merge*.py: verl's merger on torch), in one run:
# warm (the inputs read into the page cache before every command) and cold (caches dropped
# before every command), with the output on tmpfs (/dev/shm) and on disk. Each round runs the
# commands in an order that alternates (cp, vmerge, python / python, vmerge, cp), so drift in
# the machine's load hits all of them alike; the table gives medians with min-max and the
# median of the per-round ratios.
#
#   bash scripts/bench/bench_alternating.sh [SIZE_GB] [WORLD]      (defaults: 1 GB, W=8)
#
# KIND picks the checkpoint and the merge (default fsdp):
#   fsdp      verl FSDP2, W rank files (make_bench_checkpoint.py; BF16=1: bf16 masters, no cast)
#   megatron  verl Megatron legacy tp=2 pp=2 (make_bench_megatron.py; WORLD is ignored)
#   lora      verl FSDP with a rank-64 LoRA adapter, folded (--merge_lora; make_bench_lora.py)
#   hdf5      the fsdp checkpoint into one zstd:3 archive (--format hdf5 --compress zstd; no
#             Python row: the target there is 2 ranks not slower than 1)
# Environment: PAIRS (rounds per setting, default 5), NP (ranks for the extra vmerge -np row,
# default 2; 0 drops it), MODES (default "warm cold"), OUTPUTS (default "tmpfs disk"),
# PYTHON_ROW (1: time the Python way too, the default; 0 skips it), BENCH_DIR (default
# /tmp/vmerge-bench). Every command ends with sync (vmerge fsyncs what it writes). Cold runs
# need root (echo 3 > /proc/sys/vm/drop_caches); without it they are reported as not run.
set -euo pipefail
SIZE_GB=${1:-1}
WORLD=${2:-8}
PAIRS=${PAIRS:-5}
MODES=${MODES:-warm cold}
OUTPUTS=${OUTPUTS:-tmpfs disk}
PYTHON_ROW=${PYTHON_ROW:-1}
KIND=${KIND:-fsdp}
BF16=${BF16:-0}
source "$(dirname "$0")/bench_lib.sh"
LOG=$BENCH_DIR/alternating-logs
rm -rf "$LOG"
mkdir -p "$LOG"
bf16_flag=()
[ "$BF16" = 1 ] && bf16_flag=(--dtype bf16)  # the generator's flag: bf16 parameters
case $KIND in
    fsdp | hdf5)
        CKPT=$BENCH_DIR/actor
        [ "$BF16" = 1 ] && CKPT=$CKPT-bf16
        reuse_or_generate "$CKPT.params" "size_gb=$SIZE_GB world=$WORLD bf16=$BF16" "$CKPT" \
            "$PY" scripts/bench/make_bench_checkpoint.py "$CKPT" --size-gb "$SIZE_GB" --world "$WORLD" "${bf16_flag[@]}"
        INPUTS=("$CKPT"/model_world_size_*_rank_*.pt)
        PYTHON_CMD=("$PY" scripts/bench/python_merge.py "$CKPT")
        MERGE_ARGS=()
        if [ "$KIND" = hdf5 ]; then MERGE_ARGS=(--format hdf5 --compress zstd:3); PYTHON_ROW=0; fi ;;
    megatron)
        CKPT=$BENCH_DIR/megatron/actor
        reuse_or_generate "$BENCH_DIR/megatron.params" "size_gb=$SIZE_GB tp=2 pp=2" "$CKPT" \
            "$PY" scripts/bench/make_bench_megatron.py "$BENCH_DIR/megatron" --size-gb "$SIZE_GB" --tp 2 --pp 2
        mapfile -t INPUTS < <(find "$CKPT/model" -name 'model.pt' | sort)
        PYTHON_CMD=("$PY" scripts/bench/python_merge_megatron.py "$CKPT")
        MERGE_ARGS=() ;;
    lora)
        CKPT=$BENCH_DIR/lora/global_step_1/actor
        reuse_or_generate "$BENCH_DIR/lora.params" "size_gb=$SIZE_GB world=$WORLD rank=64" "$CKPT" \
            "$PY" scripts/bench/make_bench_lora.py "$BENCH_DIR/lora" --size-gb "$SIZE_GB" --world "$WORLD" --rank 64
        INPUTS=("$CKPT"/model_world_size_*_rank_*.pt)
        PYTHON_CMD=("$PY" scripts/bench/python_merge_lora.py "$CKPT")
        PYTHON_TAIL=(16)  # the generator's lora_alpha
        MERGE_ARGS=(--merge_lora) ;;
    *) echo "KIND=$KIND: expected fsdp, megatron, lora or hdf5" >&2; exit 2 ;;
esac
PYTHON_TAIL=("${PYTHON_TAIL[@]+"${PYTHON_TAIL[@]}"}")
IN_BYTES=$(stat -c %s "${INPUTS[@]}" | awk '{s+=$1} END {print s}')
snapshot_vmerge
wait_for_idle

out_root() { [ "$1" = tmpfs ] && echo /dev/shm/vmerge-bench-out || echo "$BENCH_DIR/out"; }

# prepare MODE: the page cache as the mode wants it, before one command.
prepare() {
    if [ "$1" = cold ]; then
        sync
        echo 3 > /proc/sys/vm/drop_caches
    else
        cat "${INPUTS[@]}" > /dev/null
        find "$CKPT" -name '*.json' -exec cat {} + > /dev/null 2>&1 || true
    fi
}

# timed NAME MODE OUTDIR CMD...: one run; appends "seconds peak_rss_kib" to $LOG/NAME.
timed() {
    local name=$1 mode=$2 dir=$3
    shift 3
    rm -rf "$dir"
    sync
    prepare "$mode"
    local start end
    start=$(date +%s.%N)
    /usr/bin/time -f %M -o "$LOG/rss.tmp" "$@" > "$LOG/$name.out" 2>&1 || {
        cat "$LOG/$name.out" >&2; echo "$name failed" >&2; exit 1; }
    sync
    end=$(date +%s.%N)
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.3f", b - a}') $(tail -n 1 "$LOG/rss.tmp")" >> "$LOG/$name"
    rm -rf "$dir"
}

# The commands of one round, by name.
run_cmd() {
    local which=$1 mode=$2 out=$3
    case $which in
        cp) timed "$mode.$out.cp" "$mode" "$(out_root "$out")/copy" \
                bash -c 'mkdir -p "$0" && cp --backup=numbered "$@" "$0"/' "$(out_root "$out")/copy" "${INPUTS[@]}" ;;
        vmerge) timed "$mode.$out.vmerge" "$mode" "$(out_root "$out")/vmerge" \
                "$VMERGE" merge --local_dir "$CKPT" --target_dir "$(out_root "$out")/vmerge" -q "${MERGE_ARGS[@]}" ;;
        vmerge_np) timed "$mode.$out.vmerge_np" "$mode" "$(out_root "$out")/vmerge" \
                mpirun --oversubscribe -np "$NP" "$VMERGE" merge --local_dir "$CKPT" \
                --target_dir "$(out_root "$out")/vmerge" -q "${MERGE_ARGS[@]}" ;;
        python) timed "$mode.$out.python" "$mode" "$(out_root "$out")/python" \
                "${PYTHON_CMD[@]}" "$(out_root "$out")/python" "${PYTHON_TAIL[@]}" ;;
    esac
}

commands=(cp vmerge)
[ "${NP:-2}" != 0 ] && commands+=(vmerge_np)
[ "$PYTHON_ROW" = 1 ] && commands+=(python)
for mode in $MODES; do
    if [ "$mode" = cold ] && ! (sync && echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
        echo "cold: cannot drop the page cache here (needs root); skipped"
        continue
    fi
    for out in $OUTPUTS; do
        mkdir -p "$(out_root "$out")"
        for round in $(seq 1 "$PAIRS"); do
            order=("${commands[@]}")
            if [ $((round % 2)) = 0 ]; then
                order=()
                for ((k = ${#commands[@]} - 1; k >= 0; k--)); do order+=("${commands[k]}"); done
            fi
            for which in "${order[@]}"; do run_cmd "$which" "$mode" "$out"; done
            echo "   $mode/$out round $round: $(for w in "${commands[@]}"; do printf '%s %ss  ' "$w" \
                "$(tail -n 1 "$LOG/$mode.$out.$w" | cut -d' ' -f1)"; done)"
        done
    done
done
rm -rf /dev/shm/vmerge-bench-out "$BENCH_DIR/out"

echo
echo "checkpoint ($KIND): $CKPT, $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.2f", b/1e9}') GB in ${#INPUTS[@]} files; vmerge flags: ${MERGE_ARGS[*]:-none}; $(machine_line)"
echo "commit $(git -C "$ROOT" rev-parse --short HEAD); $PAIRS alternating rounds per setting; load at start: $BENCH_LOAD"
echo
echo "| setting | command | wall s median (min-max) | / cp (median of rounds) | peak RSS MiB |"
echo "|---|---|---|---|---|"
for mode in $MODES; do
    for out in $OUTPUTS; do
        [ -f "$LOG/$mode.$out.cp" ] || continue
        for which in "${commands[@]}"; do
            f=$LOG/$mode.$out.$which
            stats=$(sort -g "$f" | awk '{w[NR]=$1; if ($2 > m) m = $2} END {printf "%.2f (%.2f-%.2f) %d", w[int((NR+1)/2)], w[1], w[NR], m/1024}')
            ratio=$(paste -d' ' "$f" "$LOG/$mode.$out.cp" | awk '{print $1/$3}' | sort -g |
                    awk '{r[NR]=$1} END {printf "%.2f (%.2f-%.2f)", r[int((NR+1)/2)], r[1], r[NR]}')
            set -- $stats
            echo "| $mode, out on $out | $which | $1 $2 | $ratio | $3 |"
        done
    done
done
