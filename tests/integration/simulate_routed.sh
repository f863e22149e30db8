#!/bin/bash
# inspect --simulate of a routed FSDP merge against a real one: the simulated save fsdp:8 of the
# w8_empty fixture's config.json (a verl FSDP2 save of 8 rank files, Shard(0), fp32, with empty
# shards) is what the fixture holds, so the figures the simulation reports for NP ranks must be
# those the real routed merge's ranks report in --log_json: the most entries a rank receives,
# all entries routed, and the modelled rank's own entries.
# usage: simulate_routed.sh VMERGE MPIEXEC PYTHON FIXTURES NP WORK
set -euo pipefail
vmerge=$1 mpiexec=$2 python=$3 fixtures=$4 np=$5 work=$6
rm -rf "$work"
mkdir -p "$work"
save=$fixtures/w8_empty
"$vmerge" inspect --simulate fsdp:8 --hf_config "$save/huggingface" --np "$np" --json >"$work/simulate.json"
"$mpiexec" --oversubscribe -np "$np" "$vmerge" merge --local_dir "$save" --target_dir "$work/out" --quiet \
    --log_json "$work/merge.json"
"$python" - "$work/simulate.json" "$work/merge.json" "$np" <<'PY'
import json, sys
sim = json.load(open(sys.argv[1]))
ranks = json.load(open(sys.argv[2]))["per_rank"]
np_ = int(sys.argv[3])
assert sim["simulated_planning"] == "routed", sim.get("simulated_planning_note")
assert "scan_exchange" not in sim and "routed_exchange" not in sim, "the all-gather was modelled too"
x = sim["routed_planning"]
real = [r["entries_received"] for r in sorted(ranks, key=lambda r: r["rank"])]
assert {r["planning"] for r in ranks} == {"routed"}, ranks
assert x["ranks"] == np_ and len(real) == np_, (x["ranks"], real)
assert x["files"] == 8 and x["shards"] == 8 * 15, (x["files"], x["shards"])
assert x["received_entries_per_rank_max"] == max(real), (x["received_entries_per_rank_max"], real)
assert x["routed_entries"] == sum(real), (x["routed_entries"], real)
assert abs(x["received_entries_per_rank_mean"] - sum(real) / np_) < 1e-9, x
m = x["modelled_ranks"][0]
assert m["chosen_as"] == "most bytes received" and m["received_bytes"] == x["received_bytes_per_rank_max"], m
assert m["received_entries"] == real[m["rank"]], (m, real)
for m in x["modelled_ranks"]:
    assert m["received_entries"] == real[m["rank"]], (m, real)
    assert m["planning_seconds"] > 0 and m["resident_peak_bytes"] >= m["resident_before_bytes"] > 0, m
    assert m["over_budget"] == "", m
print("fsdp:8 on %d ranks: simulated entries per rank max %d, all %d; the real merge's per rank %s; "
      "modelled rank %d planned in %.3f s, %.1f MiB resident at the peak"
      % (np_, x["received_entries_per_rank_max"], x["routed_entries"], real, x["modelled_ranks"][0]["rank"],
         x["modelled_ranks"][0]["planning_seconds"], x["modelled_ranks"][0]["resident_peak_bytes"] / 2**20))
PY

# Where a merge would not route, the all-gather is modelled and the planning says why: a tied
# head (the skeleton needs source bytes), --quantize.
"$vmerge" inspect --simulate fsdp:8 --hf_config "$fixtures/tied_w2/huggingface" --np "$np" --json >"$work/tied.json"
"$vmerge" inspect --simulate fsdp:8 --hf_config "$save/huggingface" --np "$np" --quantize int --json >"$work/quantize.json"
"$python" - "$work/tied.json" "$work/quantize.json" <<'PY'
import json, sys
for path, why in zip(sys.argv[1:], ["names and shapes", "--quantize"]):
    j = json.load(open(path))
    assert j["simulated_planning"] == "all-gather", (path, j.get("simulated_planning"))
    assert why in j["simulated_planning_note"], (path, j["simulated_planning_note"])
    assert "routed_planning" not in j and j["scan_exchange"]["files"] == 8, path
    print("%s: all-gather modelled (%s)" % (path.rsplit("/", 1)[1], j["simulated_planning_note"]))
PY
