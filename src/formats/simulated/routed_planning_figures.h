#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace vmerge {

// What inspect --simulate measures of a merge that plans routed (docs/scaling.md, "Routed
// planning"), in place of the all-gather's figures (scan_exchange_model.h): what every rank
// receives, counted from every sender's routed messages, and one modelled rank's planning
// (the rank receiving the most bytes, and the one receiving the most entries when another),
// done in this process with the merge's functions (mpi/routed_fsdp_simulation.h).

// One rank's planning as the merge runs it, in this process.
struct ModelledRoutedRank {
    int rank = 0;
    std::string chosen_as;  // "most bytes received" / "most entries received"
    uint64_t received_bytes = 0;
    uint64_t received_entries = 0;
    uint64_t input_files = 0;  // the files whose shards it received: the files its rows read
    size_t own_files = 0;      // the rank files it scanned (r, r + P, ...)
    // Its steps: its own files' checks and every file's check decoded, the skeleton's mapping,
    // the plan, the readers of its shards and its outgoing messages, decoding what it received,
    // composing its mapping and the budget check.
    double checks_seconds = 0, map_seconds = 0, plan_seconds = 0, route_seconds = 0, decode_seconds = 0,
           compose_seconds = 0;
    double planning_seconds() const {
        return checks_seconds + map_seconds + plan_seconds + route_seconds + decode_seconds + compose_seconds;
    }
    // Resident memory of the process (VmRSS, VmHWM) from just before the rank's work (its own
    // files' scans made then) to its composed mapping: what it holds while planning.
    bool peak_measured = false;  // false: the kernel keeps no resettable peak (counts from start)
    uint64_t resident_before_bytes = 0;
    uint64_t resident_peak_bytes = 0;
    // mapping_metadata_bytes of its composed mapping, and the budget check's text ("" if it fits).
    uint64_t metadata_whole_bytes = 0, metadata_share_bytes = 0;
    std::string over_budget;
};

struct RoutedPlanningFigures {
    int ranks = 0;
    size_t files = 0;
    uint64_t shards = 0;           // entries in all rank files
    uint64_t routed_entries = 0;   // entries sent, over all (sender, receiver) pairs
    // Over every rank of the merge, counted from every sender's routed messages.
    uint64_t received_bytes_max = 0;
    double received_bytes_mean = 0;
    uint64_t received_entries_max = 0;
    double received_entries_mean = 0;
    uint64_t input_files_max = 0;
    double input_files_mean = 0;
    // The slowest sender's work before the exchange: its files' checks, readers and messages.
    double sender_seconds_max = 0;
    double sweep_seconds = 0;  // this process's pass over every sender (the model's own cost)
    std::vector<ModelledRoutedRank> modelled;
};

}  // namespace vmerge
