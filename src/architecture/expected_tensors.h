#pragma once
#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"

namespace vmerge {

// The tensors a Hugging Face model of this config holds, with their shapes, derived from
// config.json alone, independently of any checkpoint: the model's ends (embedding, final norm,
// head), then every decoder layer (and MTP depth) built from the pieces arch.tensors names
// (attention, dense MLP or routed experts, shared experts, router bias).
ExpectedTensors expected_hf_tensors(const HfConfig& config, const ArchitectureInfo& arch);

}  // namespace vmerge
