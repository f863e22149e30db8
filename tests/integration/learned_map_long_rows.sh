#!/bin/bash
# map on rows longer than the 2^16 elements it compares of a row (compared_spans): torchtitan
# grouped experts compared whole, transposed, one expert's matrix a row ([576, 288] and
# [288, 288]), read and compared span by span (scripts/bench/make_bench_grouped_experts.py at
# --dim 288, its base the exact transposes). The rules must be transpose rules at distance 0 (the
# spans read from the checkpoint's transposed view and from the base file are the same elements),
# and the table the same with 1 and 2 ranks.
# usage: learned_map_long_rows.sh VMERGE MPIEXEC PYTHON SOURCE_DIR WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 source_dir=$4 work=$5
rm -rf "$work"
mkdir -p "$work"
"$python" "$source_dir/scripts/bench/make_bench_grouped_experts.py" "$work/ckpt" --experts 3 --layers 2 --dim 288
"$vmerge" inspect --suggest_table --json --local_dir "$work/ckpt/outputs" --base "$work/ckpt/base" \
    --out "$work/table.json" >"$work/inspect.json"
"$mpiexec" --oversubscribe -np 2 "$vmerge" map --local_dir "$work/ckpt/outputs" --base "$work/ckpt/base" \
    --out "$work/table.np2.json" --quiet
cmp "$work/table.json" "$work/table.np2.json"
"$python" - "$work/inspect.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["refused"] == [], doc["refused"]
rules = {r["from"]: r for r in doc["rules"]}
for grouped, hf in (("mlp1_weight_EGD", "gate_up_proj"), ("mlp2_weight_EDF", "down_proj")):
    r = rules["layers.{i}.moe.routed_experts.inner_experts." + grouped]
    assert r["to"] == ["model.layers.{i}.mlp.experts." + hf] and r.get("transpose"), r
    assert r["worst_distance"] == 0 and r["tensors"] == 2, r
print("long rows: transpose rules at distance 0")
PY
echo "learned map on long rows: ok"
