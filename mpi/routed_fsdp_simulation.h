#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "formats/simulated/routed_planning_figures.h"
#include "routed_fsdp_merge.h"

namespace vmerge {

// inspect --simulate of a merge that plans routed (routed_fsdp_merge.h), with the functions the
// merge runs, in this process, the rank files made one sender at a time:
// 1. a sweep over the P senders (rank s scans files s, s + P, ...): each sender's files are made,
//    checked (check_fsdp_file), their readers found (fsdp_shard_readers, against the plan of the
//    skeleton's mapping) and split into its P messages (routed_scan_messages); what each rank
//    receives is summed (RoutedShareTally) and the messages kept on disk (RoutedMessageStore);
// 2. the rank receiving the most bytes (and the one receiving the most entries, when another)
//    then plans as a merge rank does, measured: its own files, file 0, every file's check
//    decoded and the verdict (routing_verdict), the skeleton's mapping (routed_skeleton_model),
//    the plan (routed_rank_work), its readers and messages, what it received decoded
//    (received_scans), its mapping composed (compose_routed_mapping) and the budget check.
struct RoutedSimulationInput {
    size_t files = 0;  // the rank files (the save's world size)
    int ranks = 1;     // the merge's
    std::function<ScannedFile(size_t file)> rank_file;  // a rank file's scan, made on demand
    SkeletonMapper map_skeleton;
    uint64_t max_shard_size = 0;
    uint64_t budget = 0;  // a rank's --max-memory
};

struct RoutedFsdpSimulation {
    std::string why_not;               // non-empty: the merge would plan from the all-gather
    std::optional<MappedModel> model;  // the skeleton's mapping: every output tensor
    RoutedPlanningFigures figures;
};

RoutedFsdpSimulation simulate_routed_fsdp(const RoutedSimulationInput& in);

}  // namespace vmerge
