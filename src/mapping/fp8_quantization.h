#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mapping/quantization.h"

namespace vmerge {

// --quantize=fp8, fp8-block and fp8-dynamic (docs/reference/fp8-formats.md §2-§4,
// lowbit-formats.md §4). Every 2-D floating `model.layers.*` Linear weight (`*_proj`, MLA
// `kv_a_proj_with_mqa`, Mixtral `w1/w2/w3`, experts and shared experts), whatever its shape
// (FP8_BLOCK: whose input size is a multiple of 128), becomes `<m>.weight` F8_E4M3 plus
// `<m>.weight_scale_inv` (fp8: F32, one per 128x128 block) or `<m>.weight_scale` (the weight
// dtype; fp8-block: one per 128x128 block, fp8-dynamic: one per row). Router gates, the shared-expert gate, value heads, MTP `eh_proj`, lm_head and
// --quantize_ignore modules stay as the unquantized merge writes them and are listed; one ignored
// part of a fused group (q/k/v, gate/up, q_a/kv_a) leaves the whole group unquantized.
QuantizationPlan plan_fp8_quantization(TensorMapping& mapping, const QuantizeSpec& spec);

// The config.json block of either FP8 scheme, the same list under every key loaders read.
nlohmann::ordered_json fp8_quantization_config(const QuantizeSpec& spec, const std::vector<std::string>& ignored);

// The group a Linear's weight is fused into by vLLM ("<parent>|qkv", "|gate_up", "|qkv_a",
// "|w13"), and its place in it (the last part has none of the 128-row rule), or empty.
struct FusedPart {
    std::string group;
    bool last = false;
};
FusedPart fused_part(const std::string& module);

}  // namespace vmerge
