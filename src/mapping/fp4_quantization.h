#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mapping/quantization.h"

namespace vmerge {

// --quantize=nvfp4 and --quantize=mxfp4: compressed-tensors `nvfp4-pack-quantized` (NVFP4A16) and
// `mxfp4-pack-quantized` (MXFP4A16), weights only, as llm-compressor's model-free path writes them
// (docs/reference/lowbit-formats.md §2.2, §3, §6). The same Linears as the FP8 schemes
// (quantization_selection.h float_scheme_linear) become `<m>.weight_packed` U8 [N, K/2] and
// `<m>.weight_scale` [N, K/group] (NVFP4: F8_E4M3 per 16; MXFP4: UE8M0 bytes as U8 per 32), plus
// NVFP4's `<m>.weight_global_scale` F32 [1], one value shared by every part of a group vLLM fuses
// (q/k/v, gate/up, MLA q_a/kv_a, Mixtral w1/w3; each expert's and the shared expert's gate/up).
// A Linear whose input size is not a multiple of the group stays in the model dtype with the rest
// of its fused group and is listed in `ignore` (compressed-tensors refuses it; vLLM cannot size its
// scales), as are --quantize_ignore modules; the experts of one MoE layer are all quantized or none.
QuantizationPlan plan_fp4_quantization(TensorMapping& mapping, const QuantizeSpec& spec);

// The config.json block of either 4-bit float scheme.
nlohmann::ordered_json fp4_quantization_config(const QuantizeSpec& spec, const std::vector<std::string>& ignored);

}  // namespace vmerge
