#pragma once
#include <string>
#include <vector>

#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// Checks a mapping's names and shapes against what config.json implies for `architecture`
// (Error listing the missing, unexpected and misshapen tensors). `value_model`: a critic's
// score head is expected, and one with a row per token is named as a causal LM's head.
void check_against_config(const TensorMapping& mapping, const HfConfig& config, const std::string& architecture,
                          const ExpectedTensors& expected, bool value_model);
// The same for a Megatron architecture; one without a tensor set (`arch.tensor_set_file`
// empty) is not checked here: its callers say so.
void check_against_config(const TensorMapping& mapping, const HfConfig& config, const ArchitectureInfo& arch);

// Up to 12 names, comma-separated, then how many there are in all: for messages.
std::string list_names(const std::vector<std::string>& names);

}  // namespace vmerge
