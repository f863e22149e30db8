#pragma once
#include <vector>

#include "formats/checkpoint.h"

namespace vmerge {

// Legacy per-rank files (model or adapter, the MegatronLegacyCheckpoint detect kept): assembled by the TP/PP rules, the
// parallelism found recorded in m.facts for inspect and checked against --tp_size/--pp_size.
TensorMapping assemble_rank_files(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans,
                                  const ArchitectureInfo& arch, const MapOptions& options, MappedCheckpoint& m,
                                  SourceLedger& ledger);

}  // namespace vmerge
