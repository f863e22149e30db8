#!/bin/bash
# inspect --simulate plans a checkpoint that does not exist; the plan must balance bytes per
# rank within 5% of the mean and cover every byte.
# usage: simulate_plan.sh VMERGE PYTHON LAYOUT HF_CONFIG NP
set -euo pipefail
vmerge=$1 python=$2 layout=$3 hf_config=$4 np=$5
"$vmerge" inspect --simulate "$layout" --hf_config "$hf_config" --np "$np" --json >"${TMPDIR:-/tmp}/simulate.$$.json"
"$python" - "${TMPDIR:-/tmp}/simulate.$$.json" "$np" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
plan, ranks = j["plan"], int(sys.argv[2])
total = sum(r["bytes"] for r in plan["per_rank"])
assert plan["ranks"] == ranks and len(plan["per_rank"]) == ranks, plan["ranks"]
assert total == j["total_bytes"], (total, j["total_bytes"])
print("%s: %d bytes, %d files, %d ranks, largest/mean - 1 = %.5f, planned in %.2f s (%.2f s in all)"
      % (j["layout"], total, len(j["output_files"]), ranks, plan["largest_over_mean"], plan["plan_seconds"],
         plan["total_seconds"]))
assert plan["largest_over_mean"] < 0.05, plan["largest_over_mean"]
if j["simulated_planning"] == "routed":
    # A routed merge (FSDP): each rank receives only its share's shards, and the modelled rank
    # (the one receiving most) planned with what it received.
    x = j["routed_planning"]
    assert "scan_exchange" not in j, "the all-gather was modelled too"
    assert 0 < x["received_entries_per_rank_max"] < x["shards"], x
    m = x["modelled_ranks"][0]
    assert m["received_bytes"] == x["received_bytes_per_rank_max"] and m["over_budget"] == "", m
    print("routed: at most %d of %d shards per rank; rank %d planned in %.2f s, %.0f MiB at the peak"
          % (x["received_entries_per_rank_max"], x["shards"], m["rank"], m["planning_seconds"],
             m["resident_peak_bytes"] / 2**20))
else:
    # The all-gather (Megatron): routing the scans would send a rank only what its share reads.
    routed, gathered = j["routed_exchange"], j["scan_exchange"]
    assert 0 < routed["received_bytes_per_rank_max"] < gathered["received_bytes_per_rank"], (routed, gathered)
    assert 0 < routed["entries_per_rank_max"] < gathered["entries"], (routed, gathered)
PY
rm -f "${TMPDIR:-/tmp}/simulate.$$.json"
