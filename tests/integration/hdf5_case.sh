#!/bin/bash
# merge --format hdf5 of one fixture case with N ranks, then:
#  - the independent h5py checker: every tensor bit for bit against the torch-written reference, attributes,
#    HF files inside and beside the archive, and (compressed) every chunk's raw zstd frame decompressed by
#    python3-zstandard / the zstd CLI to the reference rows;
#  - h5dump (if installed) reads a compressed dataset through the plugin on HDF5_PLUGIN_PATH;
#  - inspect --backend hdf5 prints the compression ratio per dtype;
#  - merge --backend hdf5 turns the archive back into an HF folder: checked by check_hf_output.py against
#    the reference, by verify, and byte-identical to the safetensors merge of the checkpoint.
# Small chunks (--hdf5_chunk_size 1KB) so that tensors span several chunks and ranks. NP 1 runs without
# mpiexec (the one-process sec2 path), NP > 1 under it (MPI-IO, collective filtered writes).
# usage: hdf5_case.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES CASE NP COMPRESS WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 case=$6 np=$7 compress=$8 work=$9

local_dir="$fixtures/$case"
reference="$fixtures/$case.reference"
hf_dir="$local_dir/huggingface"
target="$work/$case.np$np.$compress"
rm -rf "$target" "$target.hf" "$target.st"
mkdir -p "$work"
# One rank runs as a plain process (no MPI: the sec2 driver); more under mpiexec (MPI-IO).
launch=("$mpiexec" --oversubscribe -np "$np")
[[ $np -eq 1 ]] && launch=()

"${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target" --format hdf5 --compress "$compress" \
    --hdf5_chunk_size 1KB --max-memory 64KiB
compressed=()
[[ $compress != none ]] && compressed=(--compressed)
"$python" "$source_dir/tests/tools/check_hdf5_archive.py" --archive "$target" --ref "$reference" --hf "$hf_dir" \
    "${compressed[@]}"

if command -v h5dump >/dev/null; then
    h5dump -d /model/norm/weight "$target/model.h5" >"$target.dump"
    grep -q "(0): " "$target.dump" || { cat "$target.dump"; echo "FAIL: h5dump could not print the dataset"; exit 1; }
    rm -f "$target.dump"
fi

"$vmerge" verify --target_dir "$target" | tee "$target.verify"
grep -q "every byte of model.h5 matches the checksums merge recorded" "$target.verify" ||
    { echo "FAIL: verify did not check the archive's checksums"; exit 1; }
rm -f "$target.verify"

"$vmerge" inspect --backend hdf5 --local_dir "$target" | tee "$target.inspect"
grep -q "compression  $compress" "$target.inspect" || { echo "FAIL: inspect does not name the compression"; exit 1; }
grep -q "ratio" "$target.inspect" || { echo "FAIL: inspect prints no compression ratio"; exit 1; }
rm -f "$target.inspect"

"${launch[@]}" "$vmerge" merge --backend hdf5 --local_dir "$target" --target_dir "$target.hf" --max-shard-size 40KB
"$python" "$source_dir/tests/tools/check_hf_output.py" --out "$target.hf" --ref "$reference" --hf "$hf_dir"
"$vmerge" verify --target_dir "$target.hf"
"${launch[@]}" "$vmerge" merge --local_dir "$local_dir" --target_dir "$target.st" --max-shard-size 40KB --quiet
weights() { (cd "$1" && ls ./*.safetensors ./*.index.json 2>/dev/null || true); }
[[ $(weights "$target.st") == $(weights "$target.hf") ]] || { echo "FAIL: other files than the safetensors merge"; exit 1; }
for f in $(weights "$target.st"); do cmp "$target.st/$f" "$target.hf/$f"; done
rm -rf "$target" "$target.hf" "$target.st"
