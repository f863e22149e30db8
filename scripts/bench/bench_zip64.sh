#!/bin/bash
# ZIP64 check: a single-rank verl FSDP checkpoint whose one rank file is larger than 4 GiB (the
# embedding and every layer in one .pt, so records start and end beyond 4 GiB and the archive
# needs ZIP64 extra fields and a ZIP64 end-of-central-directory record).
#
#   bash scripts/bench/bench_zip64.sh [SIZE_GB]      (default 4.5; run by bench_fsdp.sh with BENCH_ZIP64=1)
#
# Steps: generate (make_bench_checkpoint.py --world 1); check with Python's zipfile that the file
# really is ZIP64 (records with ZIP64 extras, offsets > 4 GiB); time `vmerge-mpi merge` (1 rank,
# page cache dropped first) and `vmerge-mpi verify`; time the Python merger (python_merge.py,
# torch.load-based) as the reference and check `vmerge-mpi test --test_hf_dir` bit for bit.
# Needs about 2.1 * SIZE_GB of disk (removed at the end unless KEEP=1) and about 3 * SIZE_GB of
# RAM for the generator and the Python merger. Environment: BENCH_DIR, KEEP, BENCH_WAIT_S.
set -euo pipefail
SIZE_GB=${1:-4.5}
REPS=1
source "$(dirname "$0")/bench_lib.sh"
Z=$BENCH_DIR/zip64
CKPT=$Z/actor
OUT=$Z/vmerge-out
PYOUT=$Z/python-out
fresh_log "$BENCH_DIR/logs-zip64" "$OUT" "$PYOUT"

PARAMS="size_gb=$SIZE_GB world=1"
if [ "$(cat "$Z/params" 2>/dev/null)" != "$PARAMS" ] || [ ! -d "$CKPT" ]; then
    rm -rf "$Z"; mkdir -p "$Z"
    /usr/bin/time -v -o "$LOG/generate.time" \
        "$PY" scripts/bench/make_bench_checkpoint.py "$CKPT" --size-gb "$SIZE_GB" --world 1
    echo "generated in $(secs "$LOG/generate.time") s, peak RSS $(rss_mib "$LOG/generate.time") MiB"
    echo "$PARAMS" > "$Z/params"
else
    echo "reusing $CKPT ($PARAMS)"
fi
RANKFILE=$CKPT/model_world_size_1_rank_0.pt
IN_BYTES=$(stat -c %s "$RANKFILE")

echo "== zipfile: is $RANKFILE a ZIP64 archive?"
"$PY" - "$RANKFILE" <<'EOF'
import struct, sys, zipfile
path = sys.argv[1]
LIM = 0xFFFFFFFF
with open(path, "rb") as f:
    f.seek(0, 2)
    size = f.tell()
    f.seek(max(0, size - 65536 - 22))
    tail = f.read()
eocd64 = tail.rfind(b"PK\x06\x06") >= 0
locator = tail.rfind(b"PK\x06\x07") >= 0
with zipfile.ZipFile(path) as zf:
    infos = zf.infolist()
z64 = []
for zi in infos:
    ex, i, ids = zi.extra, 0, []
    while i + 4 <= len(ex):
        hid, ln = struct.unpack("<HH", ex[i:i + 4])
        ids.append(hid)
        i += 4 + ln
    if 0x0001 in ids:
        z64.append(zi)
beyond = [zi for zi in infos if zi.header_offset > LIM]
tensors_beyond = [zi for zi in beyond if "/data/" in zi.filename]
ends_beyond = [zi for zi in infos if zi.header_offset + zi.file_size > LIM]
big = max(infos, key=lambda zi: zi.header_offset)
print("file %d bytes (%.2f GiB), %d records; ZIP64 end of central directory: %s, locator: %s"
      % (size, size / 2**30, len(infos), eocd64, locator))
print("records with a ZIP64 extra field (0x0001) in the central directory: %d; local headers beyond "
      "4 GiB: %d; records ending beyond 4 GiB: %d; last record %s at offset %d (%d bytes)"
      % (len(z64), len(beyond), len(ends_beyond), big.filename, big.header_offset, big.file_size))
print("tensor records (data/N) whose local header lies beyond 4 GiB: %d%s"
      % (len(tensors_beyond), "" if tensors_beyond else
         " (only small trailing records do: pass a larger SIZE_GB, e.g. 5.5, to put whole tensors there)"))
if not (eocd64 and locator and z64 and beyond):
    sys.exit("not a ZIP64 archive with records beyond 4 GiB: the check is meaningless")
EOF

wait_for_idle
snapshot_vmerge
echo "== vmerge-mpi merge (1 rank)"
drop_caches
/usr/bin/time -v -o "$LOG/vmerge.time" "$VMERGE" merge --local_dir "$CKPT" --target_dir "$OUT" --force \
    --progress 0 --log-json "$LOG/vmerge.json" 2>&1 | tee "$LOG/vmerge.out"
VWALL=$(secs "$LOG/vmerge.time"); VRSS=$(rss_mib "$LOG/vmerge.time")
ci_check() { if pgrep -f "$CI_PATTERN" > /dev/null; then LOADED_RUNS+=("$1"); fi; }
ci_check "vmerge-mpi merge"
"$VMERGE" verify --target_dir "$OUT"

echo "== python_merge.py (torch.load reference) + sync"
drop_caches
/usr/bin/time -v -o "$LOG/python.time" \
    bash -c "'$PY' scripts/bench/python_merge.py '$CKPT' '$PYOUT' && sync" 2>&1 | tee "$LOG/python.out"
PWALL=$(secs "$LOG/python.time"); PRSS=$(rss_mib "$LOG/python.time")
ci_check "python_merge.py"

echo "== vmerge-mpi test against the Python output"
"$VMERGE" test --local_dir "$CKPT" --test_hf_dir "$PYOUT"

echo
echo "ZIP64 checkpoint: $RANKFILE, $IN_BYTES bytes ($(awk -v b="$IN_BYTES" 'BEGIN {printf "%.2f GiB", b/2^30}')), W=1"
machine_line
echo "page cache dropped before each run: $DROPPED"
echo
echo "| method | wall s | MB/s (input) | peak RSS MiB |"
echo "|---|---:|---:|---:|"
for row in "vmerge-mpi, 1 rank|$VWALL|$VRSS" "python_merge.py (threads) + sync|$PWALL|$PRSS"; do
    IFS='|' read -r n w r <<< "$row"
    echo "| $n | $w | $(awk -v b="$IN_BYTES" -v s="$w" 'BEGIN {printf "%.0f", b/1e6/s}') | $r |"
done
if [ "${#LOADED_RUNS[@]}" -gt 0 ]; then echo; echo "warning: a CI job was running at the end of: ${LOADED_RUNS[*]}"; fi
echo
LOG_NAME=vmerge; mv "$LOG/vmerge.json" "$LOG/$LOG_NAME.1.json"
print_log_json "$LOG_NAME"

if [ "${KEEP:-0}" != 1 ]; then rm -rf "$Z"; fi
drop_snapshot
