#!/bin/bash
# Benchmarks the LoRA fold (merge --merge_lora) and export (--extract_lora) on a generated verl
# FSDP LoRA checkpoint (fp32 base, adapter of rank R on every Linear) against the copy floor and
# the Python way (python_merge_lora.py: torch.load + torch.cat + W + alpha/r * B@A + one
# safetensors file).
#
#   bash scripts/bench/bench_lora.sh [SIZE_GB] [WORLD] [RANK]      (defaults: 1 GB, W=4, r=64)
#
# Environment as bench_fsdp.sh: BENCH_DIR (default /tmp/vmerge-bench), NP (default 2), REPS
# (default 3), KEEP=1, BENCH_WAIT_S. Same method (page cache dropped before every run, cp and
# Python end with sync, median of REPS). Correctness: check_lora_output.py compares vmerge's
# fold with the Python one element by element (ulp distance in the output dtype).
set -euo pipefail
SIZE_GB=${1:-1}
WORLD=${2:-4}
RANK=${3:-64}
source "$(dirname "$0")/bench_lib.sh"
LDIR=$BENCH_DIR/lora
CKPT=$LDIR/global_step_1/actor
OUT=$BENCH_DIR/lora-vmerge-out
PYOUT=$BENCH_DIR/lora-python-out
fresh_log "$BENCH_DIR/logs-lora" "$BENCH_DIR/lora-copy" "$OUT" "$PYOUT"

reuse_or_generate "$BENCH_DIR/lora.params" "size_gb=$SIZE_GB world=$WORLD rank=$RANK" "$CKPT" \
    "$PY" scripts/bench/make_bench_lora.py "$LDIR" --size-gb "$SIZE_GB" --world "$WORLD" --rank "$RANK"
IN_BYTES=$(find "$CKPT" -name 'model_world_size_*.pt' -printf '%s\n' | awk '{s+=$1} END {printf "%d", s}')
make_rankwrap
wait_for_idle
snapshot_vmerge

JSONLOG=$LOG/vmerge.json
CP="cp -r + sync (copy floor)"
CLEAN=$BENCH_DIR/lora-copy run "$CP" bash -c "cp -r '$CKPT' '$BENCH_DIR/lora-copy' && sync"
rm -rf "$BENCH_DIR/lora-copy"
VM="vmerge-mpi --merge_lora, 1 rank"
CLEAN=$OUT run "$VM" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --merge_lora --force -q --log-json "$JSONLOG"
VN="vmerge-mpi --merge_lora, mpirun -np $NP"
CLEAN=$OUT run "$VN" mpirun --oversubscribe -np "$NP" "$RANKWRAP" "$VMERGE" merge --local_dir "$CKPT" \
    --target_dir "$OUT" --merge_lora --force -q --log-json "$JSONLOG"
VX="vmerge-mpi --extract_lora, 1 rank"
CLEAN=$OUT.extract run "$VX" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT.extract" --extract_lora --force -q \
    --log-json "$JSONLOG"
PYN="python_merge_lora.py + sync"
unset JSONLOG
CLEAN=$PYOUT run "$PYN" bash -c "'$PY' scripts/bench/python_merge_lora.py '$CKPT' '$PYOUT' 16 && sync"

echo "== vmerge's fold against the Python fold"
"$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --merge_lora --force -q
"$PY" tests/tools/check_lora_output.py --out "$OUT" --ref "$PYOUT" --mode merge

print_report "checkpoint: $CKPT, verl FSDP W=$WORLD with a LoRA adapter of rank $RANK on every Linear, \
input $(awk -v b="$IN_BYTES" 'BEGIN {printf "%.3f", b/1e9}') GB, output bf16 $(du -sb "$OUT" | awk '{printf "%.3f", $1/1e9}') GB"
ratio_row "vmerge fold 1 rank / cp" "$VM" "$CP" "-" - wall
ratio_row "Python fold / vmerge fold 1 rank" "$PYN" "$VM" ">=" 5 wall
ratio_row "Python fold / vmerge fold np=$NP" "$PYN" "$VN" ">=" 5 wall
ratio_row "vmerge fold 1 rank RSS / Python RSS" "$VM" "$PYN" "-" - rss
echo
echo "lora_s (LoRA product) in the 1-rank fold, per run:"
for f in "$LOG/$VM".*.json; do jq -r '.per_rank[] | "  copy \(.copy_s*100|round/100) s, of which lora \(.lora_s*100|round/100) s, read \(.read_s*100|round/100) s"' "$f"; done

if [ "${KEEP:-0}" != 1 ]; then
    rm -rf "$LDIR" "$BENCH_DIR/lora.params" "$OUT" "$OUT.extract" "$PYOUT"
fi
drop_snapshot
