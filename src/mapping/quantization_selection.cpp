#include "mapping/quantization_selection.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/text_pattern.h"

namespace vmerge {
namespace {

// Experts of one MoE layer: `<layer>.experts.<e>.<projection>.weight`.
struct ExpertName {
    std::string layer, projection;
};
std::optional<ExpertName> expert_name(const std::string& module) {
    static const TextPattern expert(R"((.*\.experts)\.\d+\.(.+))");
    TextMatch m;
    if (!expert.full_match(module, m)) return std::nullopt;
    return ExpertName{m[1], m[2]};
}

}  // namespace

std::string module_of(const std::string& weight_name) { return weight_name.substr(0, weight_name.size() - 7); }

bool float_scheme_linear_name(const std::string& name) {
    static const TextPattern linear(R"(model\.layers\..*(_proj|\.kv_a_proj_with_mqa|\.w[123])\.weight)");
    return linear.full_match(name) && !name.ends_with(".eh_proj.weight");
}

bool float_scheme_linear(const OutputTensor& t) {
    return float_scheme_linear_name(t.name) && t.shape.size() == 2 && is_floating(t.dtype);
}

bool linear_like(const OutputTensor& t) {
    return t.shape.size() == 2 && t.name.ends_with(".weight") && t.name.find("norm") == std::string::npos &&
           t.name.find("embed") == std::string::npos;
}

IgnoredModules::IgnoredModules(const std::vector<std::string>& ignore) {
    for (const auto& pattern : ignore) {
        if (pattern.starts_with("re:")) patterns_.emplace_back(pattern.substr(3), "--quantize_ignore " + pattern);
        else names_.push_back(pattern);
    }
}

bool IgnoredModules::contains(const std::string& module) const {
    return std::find(names_.begin(), names_.end(), module) != names_.end() ||
           std::any_of(patterns_.begin(), patterns_.end(), [&](const TextPattern& p) { return p.full_match(module); });
}

void ExpertSchemes::add(const std::string& module, bool quantized) {
    const auto e = expert_name(module);
    if (!e) return;
    auto& seen = seen_[e->layer + "|" + e->projection];
    std::string& slot = quantized ? seen.first : seen.second;
    if (slot.empty()) slot = module;
}

void ExpertSchemes::check() const {
    for (const auto& [key, seen] : seen_) {
        if (seen.first.empty() || seen.second.empty()) continue;
        const std::string layer = key.substr(0, key.find('|'));
        throw Error("MoE layer " + layer + ": expert " + seen.first + " is quantized but " + seen.second +
                    " is not (--quantize_ignore or its input size): vLLM's fused MoE layer loads every expert "
                    "of a layer with one scheme; ignore all experts of " + layer + " or none");
    }
}

}  // namespace vmerge
