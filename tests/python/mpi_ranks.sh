#!/bin/bash
# The vmerge module under mpirun (MPI build with libvmerge.so): 2 and 3 Python processes each call
# merge() and are the ranks of one merge, which writes the same bytes as `mpirun vmerge-mpi merge`
# with as many ranks; each rank's progress is its share, the shares add up to the merge's total,
# and the result document is rank 0's (the others get {}).
# usage: mpi_ranks.sh PYTHON LIBVMERGE SOURCE_DIR VMERGE MPIEXEC WORK
set -uo pipefail
python=$1 library=$2 source_dir=$3 vmerge=$4 mpiexec=$5 work=$6
fail() { echo "FAIL: $*"; exit 1; }
checkpoint="$source_dir/examples/tiny-qwen2-fsdp/global_step_1/actor"
rm -rf "$work"
mkdir -p "$work"
for np in 2 3; do
    "$mpiexec" --oversubscribe -np "$np" -x PYTHONPATH="$source_dir/python" -x VMERGE_LIBRARY="$library" \
        "$python" "$source_dir/tests/python/mpi_ranks.py" "$checkpoint" "$work/python.np$np" "$work/np$np" \
        >"$work/np$np.out" 2>&1 || { cat "$work/np$np.out"; fail "np $np: the Python ranks failed"; }
    cat "$work/np$np".rank* >"$work/np$np.log"
    "$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$checkpoint" --target_dir "$work/command.np$np" \
        --max-shard-size 400KB --quiet || fail "np $np: the command failed"
    diff -r "$work/python.np$np" "$work/command.np$np" >/dev/null || fail "np $np: the Python merge differs from the command's"
    grep -q "^rank 0: ranks $np, " "$work/np$np.log" || { cat "$work/np$np.log"; fail "np $np: rank 0 did not report $np ranks"; }
    [[ $(grep -c "document keys 0$" "$work/np$np.log") == $((np - 1)) ]] || { cat "$work/np$np.log"; fail "np $np: documents"; }
    sum=$(sed -n 's/.*wrote \([0-9]*\) of \([0-9]*\) bytes.*/\1/p' "$work/np$np.log" | awk '{s += $1} END {print s}')
    total=$(sed -n 's/.*wrote [0-9]* of \([0-9]*\) bytes.*/\1/p' "$work/np$np.log" | sort -u)
    [[ $sum == "$total" ]] || { cat "$work/np$np.log"; fail "np $np: the ranks wrote $sum bytes of $total"; }
    echo "ok   $np Python ranks: one merge, byte-identical to mpirun -np $np vmerge-mpi; shares $sum = $total bytes"
done
rm -rf "$work"
