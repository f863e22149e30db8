#pragma once
#include <vector>

#include "formats/source_ledger.h"

namespace vmerge {

// Error naming the tensor and both files unless every dropped replica holds the values of the
// source kept in its place: the same dtype and geometry, and the same bytes (by the records'
// CRC-32 where both files carry one and the view covers the whole record; else read and
// compared). Two pipeline stages' output_layer, a TP-replicated norm, an expert-parallel
// folder's copy of a dense weight, an HSDP replica: a copy that differs is refused, not picked.
void check_replicas_agree(const std::vector<ReplicaPair>& replicas);

}  // namespace vmerge
