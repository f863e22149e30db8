#include "mapping/fp4_passthrough.h"

#include <bit>
#include <cstdint>
#include <map>

#include "mapping/fp8_quantization.h"
#include "mapping/quantization_selection.h"

namespace vmerge {
namespace {

// The source scales of `t` when it is a 4-bit source of `scheme` with nothing to fold; else null.
const SourceScales* same_scheme_source(const TensorMapping& mapping, const OutputTensor& t, QuantScheme scheme) {
    if (!t.source_scales || t.lora_delta || t.packed_codes_shape.empty()) return nullptr;
    const SourceScales& s = mapping.source_scales.at(*t.source_scales);
    const SourceCodes wanted = scheme == QuantScheme::Nvfp4 ? SourceCodes::Nvfp4 : SourceCodes::Mxfp4;
    return s.codes == wanted ? &s : nullptr;
}

}  // namespace

Fp4PassThrough fp4_pass_through_modules(const TensorMapping& mapping, QuantScheme scheme) {
    struct Group {
        std::vector<std::string> modules;
        bool all_sources = true;
        std::set<uint32_t> global_scales;  // bit patterns
    };
    std::map<std::string, Group> groups;
    for (const OutputTensor& t : mapping.tensors) {
        if (!float_scheme_linear(t)) continue;
        const std::string module = module_of(t.name);
        const std::string fused = fused_part(module).group;
        Group& g = groups[fused.empty() ? module : fused];
        g.modules.push_back(module);
        const SourceScales* s = same_scheme_source(mapping, t, scheme);
        if (!s) g.all_sources = false;
        else g.global_scales.insert(std::bit_cast<uint32_t>(s->global_scale_value));
    }
    Fp4PassThrough out;
    for (const auto& [name, g] : groups) {
        if (!g.all_sources) continue;
        if (g.global_scales.size() > 1) {
            if (out.split++ == 0) out.split_example = name;
            continue;
        }
        out.modules.insert(g.modules.begin(), g.modules.end());
    }
    return out;
}

std::vector<OutputTensor> fp4_passed_through(const TensorMapping& mapping, const OutputTensor& t,
                                             const std::string& module) {
    const SourceScales& source = mapping.source_scales.at(*t.source_scales);
    OutputTensor packed = t;
    packed.name = module + ".weight_packed";
    packed.shape = t.assembled_shape();
    packed.source_dtype = packed.dtype = DType::U8;
    packed.packed_codes_shape.clear();
    packed.source_scales.reset();
    std::vector<OutputTensor> out{std::move(packed), source.scales};
    out[1].name = module + ".weight_scale";
    if (source.global_scale) {
        out.push_back(*source.global_scale);
        out[2].name = module + ".weight_global_scale";
    }
    for (OutputTensor& part : out) {
        part.quantized_as_stored = true;
        part.dtype = part.source_dtype;
    }
    return out;
}

}  // namespace vmerge
