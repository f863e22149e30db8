#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "exec/copy_executor.h"
#include "mapping/quantization.h"

namespace vmerge {

// One rank's share of a merge: its stage timings and what its executor did.
struct RankMergeRecord {
    int rank = 0;
    std::string host;
    double scan_seconds = 0, map_seconds = 0, plan_seconds = 0, copy_seconds = 0, commit_seconds = 0;
    CopyStats stats;
    uint64_t peak_rss_bytes = 0;
    // How the rank planned ("routed" or "all-gather"), why not routed where that was tried, and
    // the scanned entries it received.
    std::string planning = "all-gather";
    std::string planning_note;
    uint64_t entries_received = 0;
};

// The record as one rank sends it to rank 0 (the per_rank entries of --log_json).
nlohmann::ordered_json rank_record_json(const RankMergeRecord& record);

// What a merge reports when it ends: the --log_json document and the summary lines, both
// from this one model.
struct MergeSummary {
    std::string local_dir, target_dir;
    int ranks = 1;
    double wall_seconds = 0;
    uint64_t total_bytes = 0;
    size_t files = 0;
    uint64_t max_memory = 0;
    size_t tensors = 0, adapter_tensors = 0;
    size_t archives = 0;
    // Set when the checkpoint was written as stored (an archive converted back): what it was,
    // for "converted ... from <it>" in place of "merged ... from N archives".
    std::string converted_from;
    bool resumed = false;
    std::vector<nlohmann::ordered_json> per_rank;  // rank_record_json of every rank, in rank order
    std::optional<QuantizeSpec> quantize;
    QuantizationPlan quantization;
};

// Totals over per_rank.
struct MergeTotals {
    uint64_t resumed_bytes = 0;
    uint64_t rss_min = UINT64_MAX, rss_max = 0;
    std::map<std::string, QuantError> quantization_error;  // by tensor kind, over all ranks
};
MergeTotals merge_totals(const MergeSummary& summary);

nlohmann::ordered_json merge_log_json(const MergeSummary& summary);
void print_merge_summary(const MergeSummary& summary, std::ostream& out);

}  // namespace vmerge
