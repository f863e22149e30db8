#pragma once
#include <set>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"
#include "mapping/quantization.h"

namespace vmerge {

// A compressed-tensors NVFP4/MXFP4 source written again in its own scheme (--quantize=nvfp4 /
// mxfp4): codes, group scales and (NVFP4) global scale copied bit for bit instead of dequantized and
// quantized again (which would round through bfloat16 and re-derive every scale).

// The modules that pass through: those of a fused group (q/k/v, gate/up, ..., or a module alone)
// whose every part is a source of `scheme` with no LoRA update to fold and, for NVFP4, one global
// scale bit for bit (vLLM loads a fused weight with one global scale; parts quantized with different
// ones are dequantized and quantized again with a shared one). `split` counts the groups left out
// for differing global scales, `split_example` names one.
struct Fp4PassThrough {
    std::set<std::string> modules;
    size_t split = 0;
    std::string split_example;
};
Fp4PassThrough fp4_pass_through_modules(const TensorMapping& mapping, QuantScheme scheme);

// `t`'s source tensors under their compressed-tensors names: <module>.weight_packed, .weight_scale
// and (NVFP4) .weight_global_scale, as stored.
std::vector<OutputTensor> fp4_passed_through(const TensorMapping& mapping, const OutputTensor& t,
                                             const std::string& module);

}  // namespace vmerge
