#!/bin/bash
# vmerge-mpi against the real peers, on checkpoints the real libraries wrote: verl's own
# model_merger on a verl FSDP2 actor (torch's fully_shard), DeepSpeed's own zero_to_fp32.py on
# a ZeRO-3 bf16 save (DeepSpeedEngine.save_checkpoint), each next to `cp -r` of the weight files
# (the copy floor). The peers run from build/eco-verl-venv and build/eco-venv as their users run
# them, not a re-implementation (bench_alternating.sh's "Python way" is that).
#
#   bash scripts/bench/bench_real_peers.sh
#
# The checkpoints are made once by make_real_bench_checkpoints.py under torchrun (2 gloo ranks)
# and kept in build/bench-real/ (generating takes minutes; delete the folder to regenerate).
# Each command gets one untimed warm-up, then ROUNDS alternating rounds (order reversed every
# other round, so drift in the machine's load hits every command alike), each command timed with
# /usr/bin/time -f "%e %M" around the command and a final sync, the inputs read into the page
# cache first (warm). Peak memory of an MPI run is the largest rank's (vmerge's --log_json).
# Outputs go to build/bench-real/out and are deleted after every run.
# Environment: ROUNDS (default 3), COLD (1: also a cold round set, caches dropped before each
# command, when /proc/sys/vm/drop_caches may be written; default 1), COLD_ROUNDS (default 3),
# APPEND_DOC (1: append the report to docs/performance.md; default 1).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-3}
COLD=${COLD:-1}
COLD_ROUNDS=${COLD_ROUNDS:-3}
APPEND_DOC=${APPEND_DOC:-1}
BENCH=$ROOT/build/bench-real
export OUT=$BENCH/out
LOG=$BENCH/logs
ECO_PY=$ROOT/build/eco-venv/bin/python
VERL_PY=$ROOT/build/eco-verl-venv/bin/python
FSDP=$BENCH/fsdp/global_step_1/actor
DS=$BENCH/deepspeed/checkpoint-1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export DS_ACCELERATOR=cpu   # zero_to_fp32.py imports deepspeed, which picks an accelerator

need_time() {  # Debian's `time`: bash's builtin gives neither the peak RSS nor a file
    [ -x /usr/bin/time ] && return
    echo "/usr/bin/time missing: installing Debian's time package"
    apt-get install -y time > /dev/null
}

# generate NAME KIND: build/bench-real/NAME from the generator, unless a finished one is there
# (made in NAME.tmp and renamed at the end, so an interrupted run is never reused).
generate() {
    local dir=$BENCH/$1
    if [ -d "$dir" ]; then echo "reusing $dir"; return; fi
    rm -rf "$dir.tmp"
    echo "generating $dir (minutes) ..."
    "$ECO_PY" -m torch.distributed.run --standalone --nproc_per_node=2 \
        scripts/bench/make_real_bench_checkpoints.py "$2" "$dir.tmp" > "$BENCH/gen-$1.log" 2>&1 ||
        { tail -n 30 "$BENCH/gen-$1.log" >&2; exit 1; }
    mv "$dir.tmp" "$dir"
}

# A private copy of the binary: a rebuild of build/vmerge-mpi during the run cannot change it.
snapshot_vmerge() {
    rm -rf "$BENCH/bin" && mkdir -p "$BENCH/bin"
    cp -r build/share "$BENCH/bin/share"   # the name tables travel with the binary
    cp build/vmerge-mpi "$BENCH/bin/vmerge-mpi"
    export VMERGE=$BENCH/bin/vmerge-mpi
}

bytes_of() { stat -c %s "$@" | awk '{s += $1} END {printf "%.0f", s}'; }
gb() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1e9}'; }

# The files each checkpoint's merge reads, and what cp copies: the rank files of the weights.
FSDP_INPUTS() { ls "$FSDP"/model_world_size_*_rank_*.pt; }
DS_INPUTS() { find "$DS/$(cat "$DS/latest")" -name '*.pt' | sort; }

# prepare MODE FILES...: warm reads them into the page cache; cold drops every cache.
prepare() {
    local mode=$1; shift
    if [ "$mode" = cold ]; then sync; echo 3 > /proc/sys/vm/drop_caches
    else cat "$@" > /dev/null; fi
}

# timed KEY MODE INPUTS_FN CMD...: one run into a fresh $OUT/run; appends "wall_s peak_kib" to
# $LOG/KEY (the peak is the larger of time's and, for vmerge, its largest rank's in --log_json).
timed() {
    local key=$1 mode=$2 inputs=$3; shift 3
    rm -rf "$OUT/run" "$OUT/log.json"
    sync
    prepare "$mode" $($inputs)
    if ! /usr/bin/time -f "%e %M" -o "$LOG/time.tmp" bash -c '"$@" && sync' _ "$@" > "$LOG/$key.out" 2>&1; then
        tail -n 20 "$LOG/$key.out" >&2; echo "$key failed: $*" >&2; exit 1
    fi
    local wall kib
    read -r wall kib < <(tail -n 1 "$LOG/time.tmp")
    if [ -f "$OUT/log.json" ]; then
        kib=$(jq --argjson t "$kib" '[.per_rank[].peak_rss_bytes / 1024] + [$t] | max | floor' "$OUT/log.json")
    fi
    [ "$mode" = warmup ] || echo "$wall $kib" >> "$LOG/$key"
    rm -rf "$OUT/run" "$OUT/log.json"
    echo "$wall"
}

vm() { "$VMERGE" merge --target_dir "$OUT/run" -q --log_json "$OUT/log.json" "$@"; }
vm2() { mpiexec --oversubscribe -np 2 "$VMERGE" merge --target_dir "$OUT/run" -q --log_json "$OUT/log.json" "$@"; }
copy_to_run() { mkdir -p "$OUT/run" && cp -r "$@" "$OUT/run/"; }
export -f vm vm2 copy_to_run   # timed runs them under /usr/bin/time, in a child bash

# run_cmd GROUP NAME MODE: one command of a group, by name.
run_cmd() {
    local g=$1 name=$2 mode=$3 k="$1.$2.$3"
    case $g.$name in
        fsdp.cp) timed "$k" "$mode" FSDP_INPUTS copy_to_run $(FSDP_INPUTS) ;;
        fsdp.vmerge_1) timed "$k" "$mode" FSDP_INPUTS vm --local_dir "$FSDP" ;;
        fsdp.vmerge_2) timed "$k" "$mode" FSDP_INPUTS vm2 --local_dir "$FSDP" ;;
        fsdp.verl) timed "$k" "$mode" FSDP_INPUTS "$VERL_PY" -m verl.model_merger merge \
                       --backend fsdp --local_dir "$FSDP" --target_dir "$OUT/run" ;;
        ds.cp) timed "$k" "$mode" DS_INPUTS copy_to_run "$DS/$(cat "$DS/latest")" ;;
        ds.vmerge_1_fp32) timed "$k" "$mode" DS_INPUTS vm --local_dir "$DS" --dtype fp32 ;;
        ds.vmerge_2_fp32) timed "$k" "$mode" DS_INPUTS vm2 --local_dir "$DS" --dtype fp32 ;;
        ds.vmerge_1) timed "$k" "$mode" DS_INPUTS vm --local_dir "$DS" ;;
        ds.vmerge_2) timed "$k" "$mode" DS_INPUTS vm2 --local_dir "$DS" ;;
        ds.zero_to_fp32) timed "$k" "$mode" DS_INPUTS "$ECO_PY" "$DS/zero_to_fp32.py" "$DS" \
                             "$OUT/run" "${Z2F_FLAGS[@]}" ;;
    esac
}

FSDP_CMDS=(cp vmerge_1 vmerge_2 verl)
DS_CMDS=(cp vmerge_1_fp32 vmerge_2_fp32 vmerge_1 vmerge_2 zero_to_fp32)

# zero_to_fp32 --safe_serialization, if it copes with the tied embedding (safetensors refuses
# tensors that share memory); else its default pytorch_model.bin. Doubles as its warm-up.
pick_z2f_flags() {
    Z2F_FLAGS=(--safe_serialization)
    if ! (run_cmd ds zero_to_fp32 warmup > /dev/null 2>&1); then
        # safetensors' message spans lines: keep the one that says why
        Z2F_ERROR=$(grep -E 'share memory|Error: .' "$LOG/ds.zero_to_fp32.warmup.out" | tail -n 1 | sed 's/^ *//')
        mv "$LOG/ds.zero_to_fp32.warmup.out" "$LOG/ds.zero_to_fp32.safe_serialization.out"
        echo "zero_to_fp32.py --safe_serialization failed on the tied model: $Z2F_ERROR"
        Z2F_FLAGS=()
        run_cmd ds zero_to_fp32 warmup > /dev/null
    fi
    echo "zero_to_fp32 flags: ${Z2F_FLAGS[*]:-(default: pytorch_model.bin)}"
}

# rounds GROUP MODE N CMD...: N rounds, the order reversed every other round.
rounds() {
    local g=$1 mode=$2 n=$3; shift 3
    local cmds=("$@") r k order line w
    for r in $(seq 1 "$n"); do
        order=("${cmds[@]}")
        if [ $((r % 2)) = 0 ]; then
            order=(); for ((k = ${#cmds[@]} - 1; k >= 0; k--)); do order+=("${cmds[k]}"); done
        fi
        line=""
        for k in "${order[@]}"; do
            w=$(run_cmd "$g" "$k" "$mode") || exit 1   # a failed command ends the benchmark
            line+="$k ${w}s  "
        done
        echo "   $g $mode round $r: $line"
    done
}

warmups() {  # one untimed run of each command (zero_to_fp32's is pick_z2f_flags)
    local g=$1 k w; shift
    for k in "$@"; do
        [ "$g.$k" = ds.zero_to_fp32 ] && continue
        w=$(run_cmd "$g" "$k" warmup) || exit 1
        echo "   $g warm-up $k: ${w}s"
    done
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# stat KEY FIELD: "median (min-max)" of column FIELD (1 wall, 2 KiB) of $LOG/KEY
col() { cut -d' ' -f"$2" "$LOG/$1"; }
wall_med() { col "$1" 1 | median; }
mib_max() { col "$1" 2 | sort -g | tail -n 1 | awk '{printf "%.0f", $1 / 1024}'; }
wall_range() { col "$1" 1 | sort -g | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "-" hi}'; }

# table GROUP MODE PEER CMD...: one row per command, then the vmerge rows against PEER and cp.
table() {
    local g=$1 mode=$2 peer=$3; shift 3
    local cp_w peer_w peer_m k w m
    cp_w=$(wall_med "$g.cp.$mode"); peer_w=$(wall_med "$g.$peer.$mode"); peer_m=$(mib_max "$g.$peer.$mode")
    echo "| command | wall s, median (min-max) | / cp | peak MiB | $peer / this, wall | this / $peer, memory | >= 10x faster | <= 1/20 memory |"
    echo "|---|---|---|---|---|---|---|---|"
    for k in "$@"; do
        w=$(wall_med "$g.$k.$mode"); m=$(mib_max "$g.$k.$mode")
        awk -v k="$k" -v w="$w" -v r="$(wall_range "$g.$k.$mode")" -v m="$m" -v c="$cp_w" \
            -v pw="$peer_w" -v pm="$peer_m" -v peer="$peer" 'BEGIN {
            s = pw / w; f = m / pm
            vm = (k ~ /^vmerge/)
            printf "| %s | %.2f (%s) | %.2f | %d | %s | %s | %s | %s |\n", k, w, r, w / c, m,
                (k == peer ? "-" : sprintf("%.1fx", s)), (k == peer ? "-" : sprintf("1/%.0f", 1 / f)),
                (vm ? (s >= 10 ? "yes" : "**no**") : "-"), (vm ? (f <= 0.05 ? "yes" : "**no**") : "-") }'
    done
}

machine_note() {  # nproc --all: plain nproc obeys the OMP_NUM_THREADS=1 set above
    echo "machine: $(nproc --all) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(free -g | awk '/Mem:/ {print $2}') GiB RAM, shared with other jobs (a test suite; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)): medians of alternating rounds"
}

can_drop_caches() { (sync && echo 3 > /proc/sys/vm/drop_caches) 2> /dev/null; }

report() {
    local modes=(warm) fsdp_b ds_b
    [ "$COLD_RAN" = 1 ] && modes+=(cold)
    fsdp_b=$(bytes_of $(FSDP_INPUTS)); ds_b=$(bytes_of $(DS_INPUTS))
    echo
    echo "## Real peers: verl's model_merger and DeepSpeed's zero_to_fp32"
    echo
    echo "Command: \`bash scripts/bench/bench_real_peers.sh\` (ROUNDS=$ROUNDS), commit \`$(git rev-parse --short HEAD)\`$(git diff --quiet HEAD -- src include mpi || echo ' with uncommitted changes in src/ and mpi/'), binary build/vmerge-mpi built $(stat -c %y build/vmerge-mpi | cut -c1-16), $(date -u +%Y-%m-%d)."
    echo "$(machine_note). Each command had one untimed warm-up, then $ROUNDS rounds (cold: $COLD_NOTE); wall = /usr/bin/time's %e around the command and a final \`sync\`, peak = its %M, for vmerge the largest rank's peak from \`--log_json\`. Peers from build/eco-verl-venv (verl $("$VERL_PY" -c 'import verl; print(verl.__version__)' 2> /dev/null), transformers $("$VERL_PY" -c 'import transformers; print(transformers.__version__)' 2> /dev/null)) and build/eco-venv (deepspeed $("$ECO_PY" -c 'import deepspeed; print(deepspeed.__version__)' 2> /dev/null | tail -n 1), torch $("$ECO_PY" -c 'import torch; print(torch.__version__)')). Checkpoints by \`make_real_bench_checkpoints.py\` (2 gloo ranks, random weights)."
    echo
    echo "**verl FSDP2** (torch fully_shard, Qwen2 H=2048, 16 layers, V=32000, untied, bf16 parameters): $(FSDP_INPUTS | wc -l) rank files, $(gb "$fsdp_b") GB; every merge writes $(gb "$fsdp_b") GB of bf16 (no cast). Commands (output folder OUT):"
    echo
    echo "    cp -r $(FSDP_INPUTS | sed "s|$ROOT/||" | tr '\n' ' ')OUT/"
    echo "    build/vmerge-mpi merge --local_dir ${FSDP#$ROOT/} --target_dir OUT -q --log_json LOG      # vmerge_1"
    echo "    mpiexec --oversubscribe -np 2 build/vmerge-mpi merge ... (the same)                          # vmerge_2"
    echo "    HF_HUB_OFFLINE=1 build/eco-verl-venv/bin/python -m verl.model_merger merge --backend fsdp --local_dir ${FSDP#$ROOT/} --target_dir OUT"
    for mode in "${modes[@]}"; do
        echo; echo "$mode:"; echo; table fsdp "$mode" verl "${FSDP_CMDS[@]}"
    done
    echo
    echo "**DeepSpeed ZeRO-3, bf16, one AdamW step** (HF Trainer's checkpoint-N layout, Qwen2 H=2048, 8 layers, V=32000, tied): $(DS_INPUTS | wc -l) files in $(cat "$DS/latest")/, $(gb "$ds_b") GB (fp32 masters + Adam moments; vmerge reads only the masters, $(gb "$DS_READ") GB). zero_to_fp32 and \`--dtype fp32\` write the fp32 masters ($(gb "$DS_WRITTEN_FP32") GB); vmerge's default writes config.json's bf16. Commands:"
    echo
    echo "    cp -r ${DS#$ROOT/}/$(cat "$DS/latest") OUT/"
    echo "    build/vmerge-mpi merge --local_dir ${DS#$ROOT/} --target_dir OUT -q --log_json LOG --dtype fp32   # vmerge_1_fp32 (vmerge_1: without --dtype)"
    echo "    mpiexec --oversubscribe -np 2 build/vmerge-mpi merge ... (the same)                                 # vmerge_2_fp32, vmerge_2"
    echo "    DS_ACCELERATOR=cpu build/eco-venv/bin/python ${DS#$ROOT/}/zero_to_fp32.py ${DS#$ROOT/} OUT ${Z2F_FLAGS[*]}"
    echo
    echo "$Z2F_NOTE"
    for mode in "${modes[@]}"; do
        echo; echo "$mode:"; echo; table ds "$mode" zero_to_fp32 "${DS_CMDS[@]}"
    done
}

# vmerge's own read and write volumes on the DeepSpeed checkpoint (for the report's sizes).
ds_volumes() {
    vm --local_dir "$DS" --dtype fp32 > /dev/null
    DS_READ=$(jq '[.per_rank[].bytes_read] | add' "$OUT/log.json")
    DS_WRITTEN_FP32=$(jq '[.per_rank[].bytes_written] | add' "$OUT/log.json")
    rm -rf "$OUT/run" "$OUT/log.json"
}

main() {
    need_time
    mkdir -p "$BENCH"
    rm -rf "$LOG" "$OUT" && mkdir -p "$LOG" "$OUT"
    generate fsdp fsdp
    generate deepspeed deepspeed
    snapshot_vmerge
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "free memory: $(free -g | awk '/Mem:/ {print $7}') GiB available; disk: $(df -h "$BENCH" | awk 'NR==2 {print $4}') free"
    ds_volumes
    warmups fsdp "${FSDP_CMDS[@]}"
    rounds fsdp warm "$ROUNDS" "${FSDP_CMDS[@]}"
    pick_z2f_flags
    Z2F_NOTE="zero_to_fp32 ran with ${Z2F_FLAGS[*]:-its default (pytorch_model.bin; with --safe_serialization it fails on the tied embedding: \`$Z2F_ERROR\`)}."
    warmups ds "${DS_CMDS[@]}"
    rounds ds warm "$ROUNDS" "${DS_CMDS[@]}"
    COLD_RAN=0
    COLD_NOTE="not run: COLD=0"
    if [ "$COLD" = 1 ]; then
        if can_drop_caches; then
            COLD_RAN=1; COLD_NOTE="$COLD_ROUNDS rounds, caches dropped before each command"
            rounds fsdp cold "$COLD_ROUNDS" "${FSDP_CMDS[@]}"
            rounds ds cold "$COLD_ROUNDS" "${DS_CMDS[@]}"
        else
            COLD_NOTE="not run: writing /proc/sys/vm/drop_caches is not permitted here"
            echo "cold: $COLD_NOTE; skipped"
        fi
    fi
    report | tee "$BENCH/report.md"
    rm -rf "$OUT"
    if [ "$APPEND_DOC" = 1 ]; then
        { echo; cat "$BENCH/report.md"; } >> docs/performance.md
        echo "appended to docs/performance.md"
    fi
}

main "$@"
