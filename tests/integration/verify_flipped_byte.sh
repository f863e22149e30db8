#!/bin/bash
# verify checks what merge recorded: a clean merge verifies; one flipped byte is reported
# with its file and byte range and a non-zero exit; a truncated file is refused.
# usage: verify_flipped_byte.sh VMERGE SOURCE_DIR WORK
set -uo pipefail
vmerge=$1 source_dir=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work"
"$vmerge" merge --local_dir "$source_dir/examples/tiny-qwen2-fsdp/global_step_1/actor" --target_dir "$work/out" \
    --max-shard-size 1MB --max-memory 1MiB --quiet || fail "merge failed"
[[ -f $work/out/vmerge.checksums.json ]] || fail "no checksum sidecar"
"$vmerge" verify --target_dir "$work/out" || fail "a clean merge does not verify"
file="$work/out/model-00002-of-00002.safetensors"
offset=300000
byte=$(od -An -tu1 -j $offset -N1 "$file" | tr -d ' ')
printf "$(printf '\\%03o' $(( (byte + 1) % 256 )))" | dd of="$file" bs=1 seek=$offset conv=notrunc 2>/dev/null
"$vmerge" verify --target_dir "$work/out" >"$work/verify.log" 2>&1 && { cat "$work/verify.log"; fail "a flipped byte verified"; }
cat "$work/verify.log"
grep -q "model-00002-of-00002.safetensors: bytes [0-9]*\.\.[0-9]*" "$work/verify.log" || fail "no file and byte range named"
first=$(sed -n 's/.*bytes \([0-9]*\)\.\.\([0-9]*\).*/\1 \2/p' "$work/verify.log" | head -1)
read -r lo hi <<<"$first"
(( lo <= offset && offset < hi )) || fail "the reported range $lo..$hi does not hold byte $offset"
truncate -s -1 "$file"
"$vmerge" verify --target_dir "$work/out" >"$work/truncated.log" 2>&1 && fail "a truncated file verified"
grep -q "model-00002-of-00002.safetensors" "$work/truncated.log" || fail "truncation not reported with the file"
rm -rf "$work"
echo "ok   flipped byte at $offset reported in $lo..$hi; truncation reported"
