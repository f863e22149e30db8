#pragma once
#include <vector>

#include "core/tensor_mapping.h"
#include "formats/source_ledger.h"
#include "torch/dcp_metadata.h"

namespace vmerge {

// The same canonical tensors from a torch_dist (dist_ckpt) or DCP folder: stacked layer and
// expert axes are split into one tensor per layer/expert. `chunk_scans` holds the scan of
// every chunk in metadata order (tensor by tensor, chunk by chunk).
// Non-model and _extra_state items are dropped in `ledger`.
TensorMapping assemble_dcp_tensors(const DcpMetadata& meta, const std::vector<ScannedFile>& chunk_scans,
                                   bool split_megatron_axes, SourceLedger* ledger = nullptr);

}  // namespace vmerge
