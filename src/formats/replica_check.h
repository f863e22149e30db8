#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "formats/source_ledger.h"

namespace vmerge {

// Error naming the tensor and both files unless every dropped replica holds the values of the
// source kept in its place: the same dtype and geometry, and the same bytes (equal CRC-32s of
// two records of one size say so at no cost; else the views are read and compared, up to
// `read_budget` bytes in all). Two pipeline stages' output_layer, a TP-replicated norm, an
// expert-parallel folder's copy of a dense weight, an HSDP replica: a copy that differs is
// refused, not picked. Returns a note when the budget left replicas uncompared (how many).
std::string check_replicas_agree(const std::vector<ReplicaPair>& replicas, uint64_t read_budget);

inline constexpr uint64_t kReplicaReadBudget = uint64_t{256} << 20;

}  // namespace vmerge
