#!/bin/bash
# A Megatron checkpoint with one tensor-parallel rank folder removed must fail, naming the
# missing folder, and leave no target.
# usage: megatron_missing_rank.sh VMERGE MPIEXEC FIXTURES WORK
set -uo pipefail
vmerge=$1 mpiexec=$2 fixtures=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
cp -r "$fixtures/verl_llama_tp2_pp2_vpp2" "$work/case"
rm -r "$work/case/actor/model/mp_rank_01_001"
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$work/case/actor" --target_dir "$work/out" >"$work/log" 2>&1
rc=$?
cat "$work/log"
[[ $rc -ne 0 ]] || { echo "FAIL: exit 0"; exit 1; }
grep -q "mp_rank_01_001" "$work/log" || { echo "FAIL: message does not name mp_rank_01_001"; exit 1; }
[[ ! -e $work/out ]] || { echo "FAIL: left a target"; exit 1; }
rm -rf "$work"
