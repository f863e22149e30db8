#!/bin/bash
# A zstd archive is the same whatever the rank count: every rank compresses its own chunks and rank 0 writes them
# raw (docs/hdf5.md, "Writing in parallel"). The w3_uneven checkpoint (tensors of uneven rows, some smaller than
# one chunk, chunks of 1KB so that tensors span several chunks and are split between ranks) merged with 1 rank
# (no MPI), 3 ranks and 2 ranks under a small --max-memory (many parcels, each rank with sends in flight); each
# archive passes the independent checker, and the 2- and 3-rank ones store the same chunks, byte for byte, as the
# one-rank archive (compare_hdf5_archives.py), which is what HDF5's own filter stores (unit test).
# usage: hdf5_ranks_agree.sh VMERGE MPIEXEC PYTHON SOURCE_DIR FIXTURES WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 fixtures=$5 work=$6
case=w3_uneven
rm -rf "$work"
mkdir -p "$work"
merge() {  # merge NAME LAUNCH... -- ARGS...
    local name=$1
    shift
    local launch=()
    while [[ $1 != -- ]]; do launch+=("$1"); shift; done
    shift
    "${launch[@]+"${launch[@]}"}" "$vmerge" merge --local_dir "$fixtures/$case" --target_dir "$work/$name" \
        --format hdf5 --compress zstd:5 --hdf5_chunk_size 1KB --quiet "$@"
    "$python" "$source_dir/tests/tools/check_hdf5_archive.py" --archive "$work/$name" --ref "$fixtures/$case.reference" \
        --hf "$fixtures/$case/huggingface" --compressed
}
merge np1 -- --max-memory 64KiB
merge np3 "$mpiexec" --oversubscribe -np 3 -- --max-memory 64KiB
merge np2 "$mpiexec" --oversubscribe -np 2 -- --max-memory 8KiB
"$python" "$source_dir/tests/tools/compare_hdf5_archives.py" "$work/np1/model.h5" "$work/np3/model.h5"
"$python" "$source_dir/tests/tools/compare_hdf5_archives.py" "$work/np1/model.h5" "$work/np2/model.h5"
rm -rf "$work"
