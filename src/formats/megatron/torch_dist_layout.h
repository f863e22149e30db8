#pragma once
#include <string>

#include "formats/checkpoint.h"

namespace vmerge {

// Discovers the torch_dist archive in `folder` (metadata.json beside a DCP .metadata) into `d`
// (dcp, weights_dir, description, scan jobs). False, with `evidence` saying why, when the
// folder is no archive or its archive holds no model tensors (an optimizer-only dist_ckpt/).
bool discover_torch_dist(const std::string& folder, DetectedCheckpoint& d, std::string& evidence);

}  // namespace vmerge
