#!/bin/bash
# Bad uses of the HDF5 archive: each ends with the expected exit code, an error naming what is wrong, and
# no target or staging folder left behind.
# usage: hdf5_failures.sh VMERGE MPIEXEC FIXTURES NP WORK
set -uo pipefail
vmerge=$1 mpiexec=$2 fixtures=$3 np=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
launch=("$mpiexec" --oversubscribe -np "$np")
failures=0

# expect CODE TEXT TARGET -- COMMAND...
expect() {
    local code=$1 text=$2 target=$3
    shift 4
    "$@" >"$work/log" 2>&1
    local rc=$?
    if [[ $rc -ne $code ]] || ! grep -qF -- "$text" "$work/log"; then
        echo "FAIL: $* -> exit $rc (expected $code with '$text'):"
        cat "$work/log"
        failures=$((failures + 1))
    elif [[ -n $target && ( -e $target || -n $(compgen -G "$(dirname "$target")/.$(basename "$target").vmerge-staging*") ) ]]; then
        echo "FAIL: $* left $target or its staging folder behind"
        failures=$((failures + 1))
    else
        echo "ok: $text"
    fi
}

ckpt="$fixtures/w3_uneven"
# Usage errors are found before any rank does anything: one process shows them.
expect 2 "the zstd level must be a whole number from 1 to 22" "$work/out" -- \
    "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/out" --format hdf5 --compress zstd:23
expect 2 "--compress zstd:fast: the zstd level must be" "$work/out" -- \
    "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/out" --format hdf5 --compress zstd:fast
expect 2 "--compress applies to --format hdf5" "$work/out" -- \
    "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/out" --compress zstd
expect 2 "--format parquet: expected safetensors or hdf5" "$work/out" -- \
    "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/out" --format parquet
expect 2 "--backend hdf5 writes the archive's tensors as stored; --dtype fp16" "$work/out" -- \
    "$vmerge" merge --backend hdf5 --local_dir "$work" --target_dir "$work/out" --dtype fp16
expect 2 "--backend hdf5 writes the archive's tensors and files as stored, in one pass; --hf_config applies" "$work/out" -- \
    "$vmerge" merge --backend hdf5 --local_dir "$work" --target_dir "$work/out" --hf_config "$work"

# --backend hdf5 on a folder without model.h5, and on a model.h5 that is not HDF5.
mkdir -p "$work/no-archive" "$work/not-hdf5"
expect 1 "$work/no-archive/model.h5: missing" "$work/out" -- \
    "${launch[@]}" "$vmerge" merge --backend hdf5 --local_dir "$work/no-archive" --target_dir "$work/out"
head -c 4096 /dev/urandom >"$work/not-hdf5/model.h5"
expect 1 "$work/not-hdf5/model.h5: not an HDF5 file" "$work/out" -- \
    "${launch[@]}" "$vmerge" merge --backend hdf5 --local_dir "$work/not-hdf5" --target_dir "$work/out"

# Several ranks compressing hold three parcels of at least one chunk each: a budget below that is refused
# before anything is written.
expect 1 "its compressed chunks (960 B each, --hdf5_chunk_size) need --max-memory of at least" "$work/out" -- \
    "${launch[@]}" "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/out" --format hdf5 --compress zstd \
    --hdf5_chunk_size 1KB --max-memory 4KiB

# A folder of files vmerge did not write is never replaced.
mkdir -p "$work/existing"
echo keep >"$work/existing/file"
expect 1 "exists and is not replaceable: it holds files and no vmerge.manifest.json" "" -- \
    "${launch[@]}" "$vmerge" merge --local_dir "$ckpt" --target_dir "$work/existing" --format hdf5
[[ $(cat "$work/existing/file") == keep ]] || { echo "FAIL: the existing target was touched"; failures=$((failures + 1)); }

# verify on an archive checks model.h5 against the checksum list merge wrote beside it: one changed byte
# is found and named.
"$vmerge" merge --local_dir "$ckpt" --target_dir "$work/archive" --format hdf5 --compress zstd --quiet
expect 0 "vmerge verify: every byte of model.h5 matches the checksums merge recorded (vmerge.checksums.json)" "" -- \
    "$vmerge" verify --target_dir "$work/archive"
at=$(($(stat -c %s "$work/archive/model.h5") / 2))
byte=$(dd if="$work/archive/model.h5" bs=1 skip=$at count=1 status=none | od -An -tu1 | tr -d ' ')
printf "\\x$(printf %02x $((255 - byte)))" | dd of="$work/archive/model.h5" bs=1 seek=$at conv=notrunc status=none
expect 1 "vmerge verify: 1 range differs from what merge wrote:" "" -- "$vmerge" verify --target_dir "$work/archive"

# A model.h5 among the checkpoint's HF files is a weight file, not copied: it would be published over the
# archive. The archive verifies against the checksums recorded for it.
cp -r "$ckpt" "$work/h5-in-hf"
echo "not the archive" >"$work/h5-in-hf/huggingface/model.h5"
"$vmerge" merge --local_dir "$work/h5-in-hf" --target_dir "$work/h5-in-hf-out" --format hdf5 --quiet
expect 0 "vmerge verify: OK, " "" -- "$vmerge" verify --target_dir "$work/h5-in-hf-out"

[[ $failures -eq 0 ]] && rm -rf "$work"
exit $((failures > 0))
