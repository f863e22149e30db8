#include "mapping/fp4_quantization.h"

#include <map>
#include <set>

#include "core/error.h"
#include "mapping/fp4_passthrough.h"
#include "mapping/fp8_quantization.h"
#include "mapping/quantization_selection.h"

namespace vmerge {
namespace {

int64_t group_of(QuantScheme scheme) { return scheme == QuantScheme::Nvfp4 ? kNvfp4Group : kMxfp4Group; }

// Which candidate modules stay unquantized: the user's, those whose input size is not a multiple
// of the group, and every part of a fused group one part of which is left out (vLLM loads q/k/v
// and gate/up as one layer, one scheme for all parts).
struct Fp4Selection {
    std::set<std::string> left_out_groups;
    size_t indivisible = 0, widened = 0;
    std::string indivisible_example, widened_example;
};

bool indivisible(const OutputTensor& t, int64_t group) { return float_scheme_linear(t) && t.shape[1] % group != 0; }

Fp4Selection select_groups(const TensorMapping& mapping, const IgnoredModules& ignored, int64_t group) {
    Fp4Selection s;
    for (const OutputTensor& t : mapping.tensors) {
        if (!float_scheme_linear(t)) continue;
        const std::string module = module_of(t.name);
        const FusedPart part = fused_part(module);
        if (!part.group.empty() && (ignored.contains(module) || indivisible(t, group)))
            s.left_out_groups.insert(part.group);
    }
    return s;
}

// The packed codes, the group scales and (NVFP4) the global scale that replace `t`.
std::vector<OutputTensor> fp4_tensors(OutputTensor& t, const std::string& module, QuantScheme scheme) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    OutputTensor packed;
    packed.name = module + ".weight_packed";
    packed.role = OutputTensor::Role::QuantPacked;
    packed.source_dtype = t.source_dtype;
    packed.dtype = DType::U8;
    packed.source_shape = t.shape;
    packed.shape = {rows, cols / 2};
    packed.copies = std::move(t.copies);
    packed.zero_fill = t.zero_fill;
    packed.value_offset = t.value_offset;
    packed.lora_delta = t.lora_delta;  // a LoRA merge comes before quantization
    packed.source_scales = t.source_scales;  // and a quantized source is dequantized first
    packed.packed_codes_shape = t.packed_codes_shape;
    packed.quantize_from = t.dtype;

    OutputTensor scale;
    scale.name = module + ".weight_scale";
    scale.role = OutputTensor::Role::QuantScale;
    scale.source_dtype = scale.dtype = scheme == QuantScheme::Nvfp4 ? DType::F8_E4M3 : DType::U8;
    scale.shape = {rows, cols / group_of(scheme)};
    std::vector<OutputTensor> out;
    out.push_back(std::move(packed));
    out.push_back(std::move(scale));
    if (scheme == QuantScheme::Nvfp4) {
        OutputTensor global;
        global.name = module + ".weight_global_scale";
        global.role = OutputTensor::Role::QuantGlobalScale;
        global.source_dtype = global.dtype = DType::F32;
        global.shape = {1};
        out.push_back(std::move(global));
    }
    return out;
}

std::string shape_text(const Shape& shape) {
    return "[" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + "]";
}

}  // namespace

QuantizationPlan plan_fp4_quantization(TensorMapping& mapping, const QuantizeSpec& spec) {
    const int64_t group = group_of(spec.scheme);
    QuantizationPlan plan;
    plan.ignored_modules.push_back("lm_head");
    const IgnoredModules ignored(spec.ignore);
    Fp4Selection selection = select_groups(mapping, ignored, group);
    const Fp4PassThrough pass = fp4_pass_through_modules(mapping, spec.scheme);
    size_t passed = 0;
    ExpertSchemes experts;
    std::vector<OutputTensor> out;
    std::map<std::string, std::vector<size_t>> global_groups;  // fused group (or module) -> packed tensors
    for (OutputTensor& t : mapping.tensors) {
        plan.bytes_before += t.nbytes();
        const std::string module = t.name.ends_with(".weight") ? module_of(t.name) : "";
        const bool candidate = float_scheme_linear(t);
        const std::string fused = candidate ? fused_part(module).group : "";
        bool quantized = candidate && !ignored.contains(module);
        if (quantized && indivisible(t, group)) {
            quantized = false;
            if (selection.indivisible++ == 0) selection.indivisible_example = module + " " + shape_text(t.shape);
        } else if (quantized && selection.left_out_groups.count(fused)) {
            quantized = false;
            if (selection.widened++ == 0) selection.widened_example = module;
        }
        if (candidate) experts.add(module, quantized);
        if (!quantized) {
            // Every Linear a "Linear" target matches but that is not quantized is named.
            if (linear_like(t) && module != "lm_head" && !module.empty()) plan.ignored_modules.push_back(module);
            plan.bytes_after += t.nbytes();
            out.push_back(std::move(t));
            continue;
        }
        if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
            throw Error(t.name + " is written as " + std::string(torch_name(t.dtype)) + "; --quantize=" +
                        quant_scheme_name(spec.scheme) + " quantizes bfloat16, float16 or float32 weights (--dtype)");
        if (pass.modules.count(module)) {  // a source already in this scheme: as stored
            ++passed;
            for (OutputTensor& part : fp4_passed_through(mapping, t, module)) {
                plan.bytes_after += part.nbytes();
                out.push_back(std::move(part));
            }
            continue;
        }
        std::vector<OutputTensor> parts = fp4_tensors(t, module, spec.scheme);
        const size_t base = out.size();
        parts[0].scale_tensor = base + 1;
        if (spec.scheme == QuantScheme::Nvfp4) {
            parts[0].global_scale_tensor = base + 2;
            global_groups[fused.empty() ? module : fused].push_back(base);
        }
        for (OutputTensor& part : parts) {
            plan.bytes_after += part.nbytes();
            out.push_back(std::move(part));
        }
    }
    experts.check();
    for (const auto& [name, members] : global_groups)
        for (size_t member : members) out[member].global_scale_group = members;
    mapping.tensors = std::move(out);
    if (selection.indivisible)
        plan.notes.push_back(std::to_string(selection.indivisible) + " Linear modules left unquantized: their input size is "
                             "not a multiple of " + std::to_string(group) + " (compressed-tensors refuses such a " +
                             quant_scheme_name(spec.scheme) + " weight and vLLM cannot size its scales), e.g. " +
                             selection.indivisible_example);
    if (passed)
        plan.notes.push_back(std::to_string(passed) + " " + quant_scheme_name(spec.scheme) +
                             " source weights written as stored (codes and scales bit for bit)");
    if (pass.split)
        plan.notes.push_back(std::to_string(pass.split) + " fused groups of " + quant_scheme_name(spec.scheme) +
                             " source weights whose parts hold different global scales dequantized and quantized "
                             "again with one shared global scale (vLLM loads a fused weight with one), e.g. " +
                             pass.split_example);
    if (selection.widened)
        plan.notes.push_back(std::to_string(selection.widened) + " Linear modules left unquantized with the rest of their "
                             "fused group (vLLM loads q/k/v and gate/up as one layer, one scheme for all), e.g. " +
                             selection.widened_example);
    return plan;
}

nlohmann::ordered_json fp4_quantization_config(const QuantizeSpec& spec, const std::vector<std::string>& ignored) {
    const bool nvfp4 = spec.scheme == QuantScheme::Nvfp4;
    nlohmann::ordered_json weights = {
        {"num_bits", 4},
        {"type", "float"},
        {"symmetric", true},
        {"group_size", group_of(spec.scheme)},
        {"strategy", nvfp4 ? "tensor_group" : "group"},
        {"block_structure", nullptr},
        {"dynamic", false},
        {"actorder", nullptr}};
    // MXFP4 exists only in compressed-tensors versions that know scale_dtype, and its scales are
    // the uint8 exponents only with it; NVFP4's FP8 scales are the default without it, which keeps
    // the compressed-tensors versions before scale_dtype (0.10-0.12) reading the file.
    if (!nvfp4) {
        weights["scale_dtype"] = "torch.uint8";
        weights["zp_dtype"] = "torch.uint8";
    }
    weights["observer"] = "memoryless_minmax";
    weights["observer_kwargs"] = nlohmann::ordered_json::object();
    return {{"quant_method", "compressed-tensors"},
            {"format", nvfp4 ? "nvfp4-pack-quantized" : "mxfp4-pack-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr},
                {"output_activations", nullptr}}}}},
            {"ignore", ignored},
            {"kv_cache_scheme", nullptr},
            {"global_compression_ratio", nullptr},
            {"sparsity_config", nlohmann::ordered_json::object()}};
}

}  // namespace vmerge
