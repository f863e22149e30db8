#!/bin/bash
# Memory is bounded by --max-memory, not by the model: a checkpoint more than 8x the budget
# merges with every rank's peak resident memory (as vmerge reports it in --log-json) within
# the budget plus a fixed overhead, and gives the same bytes as a merge with a large budget.
# usage: memory_bound.sh VMERGE MPIEXEC PYTHON SOURCE_DIR WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 work=$5
budget_mib=4
overhead_mib=24  # MPI, the C++ runtime, scan metadata: measured about 15 MiB on a tiny merge
rm -rf "$work"
mkdir -p "$work"
"$python" "$source_dir/scripts/bench/make_bench_checkpoint.py" "$work/ckpt" --size-gb 0.08 --world 4 --small
input=$(du -cb "$work"/ckpt/model_world_size_* | tail -1 | cut -f1)
(( input >= 8 * budget_mib * 1024 * 1024 )) || { echo "FAIL: checkpoint of $input bytes is not 8x the budget"; exit 1; }

"$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$work/ckpt" --target_dir "$work/small" \
    --max-memory "${budget_mib}MiB" --log-json "$work/small.json"
"$mpiexec" --oversubscribe -np 2 "$vmerge" merge --local_dir "$work/ckpt" --target_dir "$work/large" \
    --max-memory 1GiB --quiet
cmp "$work/small/model.safetensors" "$work/large/model.safetensors"
"$python" - "$work/small.json" "$budget_mib" "$overhead_mib" "$input" <<'PY'
import json, sys
log, budget, overhead, input_bytes = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
limit = (budget + overhead) * 2**20
for r in log["per_rank"]:
    peak = r["peak_rss_bytes"]
    print("rank %d: peak %.1f MiB (limit %.0f MiB = budget %d + overhead %d), input %.1f MiB"
          % (r["rank"], peak / 2**20, limit / 2**20, budget, overhead, input_bytes / 2**20))
    if peak > limit:
        sys.exit("FAIL: rank %d peaked at %.1f MiB" % (r["rank"], peak / 2**20))
PY
rm -rf "$work"
