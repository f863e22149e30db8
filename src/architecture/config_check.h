#pragma once
#include <string>
#include <vector>

#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// Checks a mapping's names and shapes against what config.json implies (Error listing the
// missing, unexpected and misshapen tensors). An architecture without a tensor table
// (`arch.family` empty) is not checked here; its callers say so.
void check_against_config(const TensorMapping& mapping, const HfConfig& config, const ArchitectureInfo& arch);

// Up to 12 names, comma-separated, then how many there are in all: for messages.
std::string list_names(const std::vector<std::string>& names);

}  // namespace vmerge
