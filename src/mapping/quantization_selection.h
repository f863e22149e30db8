#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/text_pattern.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// What every quantization scheme shares when it picks the Linear weights to quantize.

// `<module>.weight` -> `<module>`.
std::string module_of(const std::string& weight_name);

// A 2-D `*.weight` that is neither a norm nor an embedding: a Linear a compressed-tensors
// "Linear" target (or transformers' nn.Linear replacement) matches, so it is listed when left
// unquantized.
bool linear_like(const OutputTensor& t);

// The weights the float schemes (FP8, NVFP4, MXFP4) quantize: `model.layers.*` `*_proj` (q/k/v/o,
// gate/up/down, experts, shared experts, MLA q_a/q_b/kv_b), MLA `kv_a_proj_with_mqa`, Mixtral
// `w1/w2/w3`; not DeepSeek MTP's `eh_proj`, which vLLM builds as a plain torch Linear.
bool float_scheme_linear_name(const std::string& name);
// ... and 2-D floating.
bool float_scheme_linear(const OutputTensor& t);

// --quantize_ignore: exact module names and `re:` patterns, each pattern compiled once (a
// model has tens of thousands of tensors).
class IgnoredModules {
public:
    explicit IgnoredModules(const std::vector<std::string>& ignore);
    bool contains(const std::string& module) const;

private:
    std::vector<std::string> names_;
    std::vector<TextPattern> patterns_;
};

// Per MoE layer and projection, one quantized and one unquantized expert, when both exist:
// vLLM's fused MoE layer loads every expert of a layer with one scheme (check() throws).
class ExpertSchemes {
public:
    void add(const std::string& module, bool quantized);
    void check() const;

private:
    std::map<std::string, std::pair<std::string, std::string>> seen_;  // quantized, unquantized
};

}  // namespace vmerge
