#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm.h"
#include "core/tensor_ref.h"
#include "formats/source_ledger.h"
#include "formats/fsdp/fsdp_routing.h"
#include "mapping/map_recipe.h"
#include "plan/rank_work.h"

namespace vmerge {

// The routed merge of a verl FSDP / FSDP2 DTensor save (docs/scaling.md, "Routed planning"):
// every rank plans from a skeleton (file 0's scan with each DTensor whole), then receives from
// the ranks that scanned them only the shards its rows read, instead of every scan.

// The mapping of the skeleton, with `account` (every file's entries, as the all-gather path's
// ledger would settle them) in place of the skeleton's own; nullopt where the skeleton cannot
// stand for the checkpoint (it drops or duplicates sources, needs source bytes to check, LoRA,
// quantization) or an Error was met: the all-gather path then gives today's output or error.
using SkeletonMapper = std::function<std::optional<MappedModel>(const ScannedFile& skeleton, const SourceAccount& account)>;

struct RoutedFsdpMerge {
    MappedModel model;         // the rank's mapping: every output tensor, copies from its own shards
    std::string scans_digest;  // rank 0: of every file's scan digest in file order (--resume identity)
    size_t received_entries = 0;
};

// The two steps of route_fsdp_merge that every rank takes alike from file 0's scan and every
// file's check (routing_verdict passed), free of the Comm, so inspect --simulate runs them too:
// the skeleton's mapping where it can stand for the checkpoint (else nullopt and why), and every
// rank's rows of the safetensors output planned from its output tensors.
std::optional<MappedModel> routed_skeleton_model(const ScannedFile& first, const std::vector<FsdpFileCheck>& checks,
                                                 const SkeletonMapper& map_skeleton, std::string& why_not);
std::vector<std::vector<WriteTask>> routed_rank_work(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size,
                                                     int ranks);

// Every rank alike: the routed merge, or nullopt (and why in `why_not`) for the all-gather path.
// `mine`: this rank's scans, of files rank, rank + P, ...; rank 0 holds file 0's. A rank whose
// mapping's metadata exceeds `budget` fails every rank, saying how many ranks would fit.
std::optional<RoutedFsdpMerge> route_fsdp_merge(const std::vector<ScannedFile>& mine, size_t files,
                                                const SkeletonMapper& map_skeleton, uint64_t max_shard_size,
                                                uint64_t budget, Comm& comm, std::string& why_not);

}  // namespace vmerge
