# Helpers shared by the bench_*.sh scripts (sourced, not run).
#
# Sourcing sets what every benchmark uses: ROOT (the repository, also the working folder), NP
# (MPI ranks, default 2), REPS (runs per row, default 3), BENCH_DIR (default /tmp/vmerge-bench,
# created), VMERGE (build/vmerge-mpi, which must exist), PY (/usr/bin/python3), Open MPI's
# run-as-root variables.
# Expects at call time: LOG (log folder, see fresh_log), IN_BYTES (input bytes, for MB/s).
# Provides: fresh_log, wait_for_idle, drop_caches, secs, rss_mib, run, print_table, ratio_row,
#           print_report, print_log_json, make_rankwrap, make_no_fdatasync, reuse_or_generate;
#           WALL[name], RSS[name] (MiB).

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
NP=${NP:-2}
REPS=${REPS:-3}
BENCH_DIR=${BENCH_DIR:-/tmp/vmerge-bench}
VMERGE=$ROOT/build/vmerge-mpi
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$VMERGE" ] || { echo "build/vmerge-mpi missing: run bash scripts/build.sh" >&2; exit 1; }
mkdir -p "$BENCH_DIR"

# fresh_log DIR [PATH...]: LOG=DIR, emptied; the PATHs (outputs of an earlier run) removed.
fresh_log() {
    LOG=$1
    shift
    rm -rf "$LOG" "$@"
    mkdir -p "$LOG"
}

declare -gA WALL RSS
# what counts as other load: CI jobs and builds (a build also relinks build/vmerge-mpi, which is
# why the scripts time a private copy of the binary, see snapshot_vmerge)
CI_PATTERN=${CI_PATTERN:-"ctest|run_fuzz|vmerge_unit_tests|cmake --build|cc1plus"}
ROWS=()
LOADED_RUNS=()
DROPPED=no

# Wait until no CI job (ctest, fuzzers, unit tests, builds: $CI_PATTERN) runs on the machine, so timings are not
# polluted: poll every 15 s, at most BENCH_WAIT_S seconds (default 900). Sets BENCH_LOAD to
# "none" or a description of what was still running when the wait gave up.
wait_for_idle() {
    local waited=0 max=${BENCH_WAIT_S:-900} busy
    while busy=$(pgrep -f "$CI_PATTERN" | tr '\n' ' '); [ -n "$busy" ]; do
        if [ "$waited" -ge "$max" ]; then
            BENCH_LOAD="CI jobs still running after ${max} s (pids $busy)"
            echo "warning: $BENCH_LOAD; timing anyway" >&2
            return 0
        fi
        [ "$waited" = 0 ] && echo "waiting for CI jobs to finish (pids $busy) ..."
        sleep 15
        waited=$((waited + 15))
    done
    [ "$waited" -gt 0 ] && echo "machine idle after ${waited} s of waiting"
    BENCH_LOAD=${BENCH_LOAD:-none}
}

drop_caches() {
    sync
    if echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then DROPPED=yes; else DROPPED=no; fi
}

secs() {  # "Elapsed (wall clock) ... : [h:]m:ss.ss" from a time -v file -> seconds
    awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2, p, ":"); s=0;
                for (i=1; i<=n; i++) s = s*60 + p[i]; printf "%.2f", s}' "$1"
}
rss_mib() {  # largest "Maximum resident set size (kbytes)" over the given time -v files
    awk -F': ' '/Maximum resident set size/ {if ($2+0 > m) m = $2+0} END {printf "%.0f", m/1024}' "$@"
}

# run NAME CMD... : REPS timed runs of CMD (before each: rm -rf of $CLEAN, sync, drop caches).
# Wall = median of the runs (min-max shown); RSS = largest over the runs (and, under mpirun,
# over the per-rank time files $LOG/NAME.i.rank*, written by rankwrap.sh via $RANKTIME).
# If JSONLOG is set (the --log-json path used in CMD), each run's file is kept as
# $LOG/NAME.i.json.
run() {
    local name=$1; shift
    local walls=() rssfiles=() i
    echo "== $name: $*"
    for i in $(seq 1 "$REPS"); do
        if [ -n "${CLEAN:-}" ]; then rm -rf "$CLEAN"; fi
        drop_caches
        export RANKTIME="$LOG/$name.$i"
        if ! /usr/bin/time -v -o "$LOG/$name.$i.time" "$@" > "$LOG/$name.$i.out" 2>&1; then
            cat "$LOG/$name.$i.out" >&2; echo "step $name failed" >&2; exit 1
        fi
        walls+=("$(secs "$LOG/$name.$i.time")")
        if compgen -G "$LOG/$name.$i.rank*" > /dev/null; then
            rssfiles+=("$LOG/$name.$i".rank*)
        else
            rssfiles+=("$LOG/$name.$i.time")
        fi
        if [ -n "${JSONLOG:-}" ] && [ -f "$JSONLOG" ]; then mv "$JSONLOG" "$LOG/$name.$i.json"; fi
        local load=""
        if pgrep -f "$CI_PATTERN" > /dev/null; then
            load=" [CI job running at the end of this run: timing polluted]"
            LOADED_RUNS+=("$name run $i")
        fi
        echo "   run $i: ${walls[-1]} s (caches dropped: $DROPPED)$load $(tail -n 1 "$LOG/$name.$i.out")"
    done
    local sorted wall range rss mbs
    sorted=$(printf '%s\n' "${walls[@]}" | sort -g)
    wall=$(echo "$sorted" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    range=$(echo "$sorted" | awk 'NR==1 {lo=$1} {hi=$1} END {print lo "-" hi}')
    rss=$(rss_mib "${rssfiles[@]}")
    mbs=$(awk -v b="$IN_BYTES" -v s="$wall" 'BEGIN {printf "%.0f", (s > 0 ? b/1e6/s : 0)}')
    WALL[$name]=$wall
    RSS[$name]=$rss
    ROWS+=("| $name | $wall ($range) | $mbs | $rss |")
}

# print_report HEADLINE: the checkpoint line, the machine, how the runs were made, the timing
# table and the header of the ratio table that the script's ratio_row calls fill.
print_report() {
    echo
    echo "$1"
    machine_line
    echo
    echo "page cache dropped before every run: $DROPPED; wall = median of $REPS runs (min-max)"
    echo
    print_table
    echo
    echo "| ratio | medians | value | target | met |"
    echo "|---|---:|---:|---|---|"
}

print_table() {
    echo "| method | wall s | MB/s (input) | peak RSS MiB |"
    echo "|---|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    if [ "${#LOADED_RUNS[@]}" -gt 0 ]; then
        echo
        echo "warning: a CI job was running at the end of: ${LOADED_RUNS[*]}"
    fi
}

# ratio_row LABEL A B TARGET_OP TARGET KIND: A/B of WALL (KIND=wall) or RSS (KIND=rss) medians;
# TARGET_OP is "<=" or ">=" (or "-" for no target).
ratio_row() {
    local label=$1 a=$2 b=$3 op=$4 target=$5 kind=$6 va vb
    if [ "$kind" = rss ]; then va=${RSS[$a]:-}; vb=${RSS[$b]:-}; else va=${WALL[$a]:-}; vb=${WALL[$b]:-}; fi
    [ -n "$va" ] && [ -n "$vb" ] || return 0
    awk -v l="$label" -v a="$va" -v b="$vb" -v op="$op" -v t="$target" 'BEGIN {
        r = (b > 0 ? a / b : 0)
        if (op == "-") { tgt = "-"; met = "-" }
        else { tgt = op " " t; met = ((op == "<=" && r <= t) || (op == ">=" && r >= t)) ? "yes" : "**no**" }
        printf "| %s | %s / %s | %.2f | %s | %s |\n", l, a, b, r, tgt, met }'
}

# merge_ratio_rows CP V1 VN VNS PYN: the ratio rows the merge benchmarks share, against the
# targets (vmerge <= 1.3x the copy floor, Python >= 5x vmerge): rows named cp, vmerge 1 rank,
# vmerge np=$NP, vmerge 1 rank without fdatasync, Python.
merge_ratio_rows() {
    local cp=$1 v1=$2 vn=$3 vns=$4 pyn=$5
    ratio_row "vmerge 1 rank / cp" "$v1" "$cp" "<=" 1.3 wall
    ratio_row "vmerge np=$NP / cp" "$vn" "$cp" "<=" 1.3 wall
    ratio_row "vmerge 1 rank without fdatasync / cp" "$vns" "$cp" "<=" 1.3 wall
    ratio_row "Python / vmerge 1 rank" "$pyn" "$v1" ">=" 5 wall
    ratio_row "Python / vmerge np=$NP" "$pyn" "$vn" ">=" 5 wall
    ratio_row "vmerge 1 rank / same without fdatasync" "$v1" "$vns" "-" - wall
    ratio_row "vmerge 1 rank RSS / Python RSS" "$v1" "$pyn" "-" - rss
}

# print_log_json NAME: the per-rank breakdown of vmerge --log-json files $LOG/NAME.i.json.
print_log_json() {
    local name=$1 f
    echo "| run | rank | wall s | scan s | map s | copy s | read s | cast s | write s | commit s | read GB | written GB | peak RSS MiB |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for f in "$LOG/$name".*.json; do
        [ -f "$f" ] || continue
        local i=${f%.json}; i=${i##*.}
        jq -r --arg i "$i" '. as $top | .per_rank[] |
            "| \($i) | \(.rank) | \($top.wall_s*1000|round/1000) | \(.scan_s*1000|round/1000) | \(.map_s*1000|round/1000) | \(.copy_s*1000|round/1000) | \(.read_s*1000|round/1000) | \(.cast_s*1000|round/1000) | \(.write_s*1000|round/1000) | \(.commit_s*1000|round/1000) | \(.bytes_read/1e7|round/100) | \(.bytes_written/1e7|round/100) | \(.peak_rss_bytes/1048576|round) |"' "$f"
    done
}

# per-rank /usr/bin/time wrapper for mpirun (rank from Open MPI's environment)
make_rankwrap() {
    RANKWRAP=$LOG/rankwrap.sh
    cat > "$RANKWRAP" <<'EOF'
#!/bin/bash
exec /usr/bin/time -v -o "$RANKTIME.rank${OMPI_COMM_WORLD_RANK:-0}" "$@"
EOF
    chmod +x "$RANKWRAP"
}

# LD_PRELOAD shim that turns fdatasync() into a no-op (the final fsync stays): sets NOSYNC_SO.
make_no_fdatasync() {
    NOSYNC_SO=$LOG/no_fdatasync.so
    printf 'int fdatasync(int fd) { (void)fd; return 0; }\n' > "$LOG/no_fdatasync.c"
    cc -shared -fPIC -O2 -o "$NOSYNC_SO" "$LOG/no_fdatasync.c"
}

# snapshot_vmerge: time a private copy of the binary ($BENCH_DIR/bin/vmerge-mpi), so that a
# rebuild of build/vmerge-mpi during the benchmark cannot change or break it. A VMERGE given in
# the environment (e.g. by bench_fsdp.sh to its sub-scripts) is used as it is. Called after
# wait_for_idle, so that it does not copy a binary in the middle of being linked.
# drop_snapshot: removes the copy again (only in the script that made it).
snapshot_vmerge() {
    if [ -n "${VMERGE_SNAPSHOT:-}" ]; then VMERGE=$VMERGE_SNAPSHOT; return; fi
    mkdir -p "$BENCH_DIR/bin"
    # The name tables travel with the binary (found in share/ next to it).
    rm -rf "$BENCH_DIR/bin/share" && cp -r "$ROOT/build/share" "$BENCH_DIR/bin/share"
    cp "$ROOT/build/vmerge-mpi" "$BENCH_DIR/bin/vmerge-mpi.tmp"
    mv "$BENCH_DIR/bin/vmerge-mpi.tmp" "$BENCH_DIR/bin/vmerge-mpi"
    VMERGE=$BENCH_DIR/bin/vmerge-mpi
    export VMERGE_SNAPSHOT=$VMERGE
    SNAPSHOT_OWNER=1
    echo "vmerge: copy of build/vmerge-mpi built $(stat -c %y "$ROOT/build/vmerge-mpi" | cut -c1-19)," \
         "HEAD $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include mpi 2>/dev/null || echo ' (+ uncommitted changes in src/include/mpi)')"
}

drop_snapshot() {
    if [ "${SNAPSHOT_OWNER:-0}" = 1 ]; then rm -rf "$BENCH_DIR/bin"; fi
}

machine_line() {
    echo "machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo))," \
         "$(free -g | awk '/Mem:/ {print $2}') GiB RAM," \
         "$(df -h "$BENCH_DIR" | awk 'NR==2 {print $1}') ($(df -h "$BENCH_DIR" | awk 'NR==2 {print $2}'));" \
         "other load: ${BENCH_LOAD:-not checked}"
}

# The --log-json breakdowns of the vmerge rows: 1 rank, 1 rank without fdatasync (when run),
# and NP ranks.
# usage: print_vmerge_breakdowns LOG_1RANK LOG_NOSYNC LOG_NP NP
print_vmerge_breakdowns() {
    echo
    echo "vmerge --log-json, 1 rank (seconds per rank; write_s = busy time of the writer thread:"
    echo "cast + pwrite + fdatasync + journal, overlapped with the reads):"
    echo
    print_log_json "$1"
    if [ -n "${NOSYNC_SO:-}" ]; then
        echo
        echo "vmerge --log-json, 1 rank, fdatasync disabled:"
        echo
        print_log_json "$2"
    fi
    echo
    echo "vmerge --log-json, mpirun -np $4:"
    echo
    print_log_json "$3"
}

# reuse_or_generate PARAMS_FILE PARAMS CKPT GENERATOR...: runs GENERATOR unless CKPT exists and
# PARAMS_FILE says it was made with the same PARAMS (generating a checkpoint takes longer than
# benchmarking it).
reuse_or_generate() {
    local params_file=$1 params=$2 ckpt=$3
    shift 3
    if [ "$(cat "$params_file" 2>/dev/null)" != "$params" ] || [ ! -d "$ckpt" ]; then
        rm -f "$params_file"
        "$@"
        echo "$params" > "$params_file"
    else
        echo "reusing $ckpt ($params)"
    fi
}
