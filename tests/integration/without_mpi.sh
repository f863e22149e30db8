#!/bin/bash
# The build without MPI (-DVMERGE_MPI=OFF) end to end: a merge of the tiny example in one process
# verifies; several processes started by a launcher stop before writing anything; the HDF5
# archive is refused with the build option that has it (usage error, exit 2) and so is verify of
# a folder holding one.
# usage: without_mpi.sh VMERGE SOURCE_DIR WORK
set -uo pipefail
vmerge=$1 source_dir=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
checkpoint="$source_dir/examples/tiny-qwen2-fsdp/global_step_1/actor"
why="this vmerge-mpi was built without MPI (-DVMERGE_MPI=OFF)"
rm -rf "$work"
mkdir -p "$work"

"$vmerge" merge --local_dir "$checkpoint" --target_dir "$work/out" --quiet || fail "merge failed"
"$vmerge" verify --target_dir "$work/out" || fail "the merge does not verify"

for launcher in OMPI_COMM_WORLD_SIZE=3 PMI_SIZE=2 SLURM_STEP_NUM_TASKS=4; do
    env "$launcher" "$vmerge" merge --local_dir "$checkpoint" --target_dir "$work/launched" >"$work/launched.log" 2>&1
    rc=$?
    [[ $rc == 1 ]] || { cat "$work/launched.log"; fail "$launcher: exit $rc, expected 1"; }
    grep -q "vmerge-mpi: error: launched as ${launcher#*=} processes, but $why" "$work/launched.log" ||
        { cat "$work/launched.log"; fail "$launcher: no launch error"; }
    [[ ! -e $work/launched && -z $(ls -A "$work" | grep -v '^out$\|\.log$') ]] || fail "$launcher: something was written"
done
OMPI_COMM_WORLD_SIZE=1 "$vmerge" inspect --local_dir "$checkpoint" >/dev/null || fail "one launched process refused"

"$vmerge" merge --local_dir "$checkpoint" --target_dir "$work/archive" --format hdf5 >"$work/format.log" 2>&1
rc=$?
[[ $rc == 2 ]] || { cat "$work/format.log"; fail "--format hdf5: exit $rc, expected 2"; }
grep -q "usage error: --format hdf5: $why" "$work/format.log" || { cat "$work/format.log"; fail "--format hdf5 not explained"; }
[[ ! -e $work/archive ]] || fail "--format hdf5 left a target"

touch "$work/out.h5"  # a folder holding an archive: model.h5 and no safetensors weights
mkdir -p "$work/archive-folder" && mv "$work/out.h5" "$work/archive-folder/model.h5"
"$vmerge" verify --target_dir "$work/archive-folder" >"$work/verify.log" 2>&1
rc=$?
[[ $rc == 1 ]] || { cat "$work/verify.log"; fail "verify of an archive: exit $rc, expected 1"; }
grep -q "verify --target_dir $work/archive-folder (a model.h5 archive): $why" "$work/verify.log" ||
    { cat "$work/verify.log"; fail "verify of an archive not explained"; }
rm -rf "$work"
echo "ok   one-process merge verifies; launches of 2-4 processes, --format hdf5 and an archive's verify refused"
