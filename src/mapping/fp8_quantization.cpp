#include "mapping/fp8_quantization.h"

#include <optional>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/text_pattern.h"
#include "mapping/fp8_shape_rules.h"
#include "mapping/quantization_selection.h"

namespace vmerge {
namespace {

constexpr int64_t kBlock = 128;

// The FP8 weight and its scale tensor, replacing `t`.
std::pair<OutputTensor, OutputTensor> fp8_tensors(OutputTensor& t, const std::string& module, QuantScheme scheme) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const bool block = scheme == QuantScheme::Fp8Block || scheme == QuantScheme::Fp8CtBlock;
    OutputTensor weight;
    weight.name = t.name;
    weight.role = OutputTensor::Role::QuantPacked;
    weight.source_dtype = t.source_dtype;
    weight.dtype = DType::F8_E4M3;
    weight.source_shape = t.shape;
    weight.shape = t.shape;
    weight.copies = std::move(t.copies);
    weight.zero_fill = t.zero_fill;
    weight.value_offset = t.value_offset;
    weight.lora_delta = t.lora_delta;  // a LoRA merge comes before quantization
    weight.source_scales = t.source_scales;  // and a quantized source is dequantized first
    weight.packed_codes_shape = t.packed_codes_shape;
    weight.quantize_from = t.dtype;
    // A block scale needs its whole 128-row stripe: ranks and blocks start on stripes.
    weight.row_align = block ? kBlock : 1;
    weight.scale_row_block = block ? kBlock : 1;

    OutputTensor scale;
    scale.role = OutputTensor::Role::QuantScale;
    if (scheme == QuantScheme::Fp8Block) {
        scale.name = module + ".weight_scale_inv";
        scale.source_dtype = scale.dtype = DType::F32;
        scale.shape = {(rows + kBlock - 1) / kBlock, (cols + kBlock - 1) / kBlock};
    } else if (scheme == QuantScheme::Fp8CtBlock) {
        scale.name = module + ".weight_scale";
        scale.source_dtype = scale.dtype = t.dtype;  // compressed-tensors: the observed weight's dtype
        scale.shape = {(rows + kBlock - 1) / kBlock, (cols + kBlock - 1) / kBlock};
    } else {
        scale.name = module + ".weight_scale";
        scale.source_dtype = scale.dtype = t.dtype;  // compressed-tensors: the observed weight's dtype
        scale.shape = {rows, 1};
    }
    return {std::move(weight), std::move(scale)};
}

// An FP8 source weight already in the output scheme, with no LoRA update to fold: written as it
// is, codes and scales bit for bit, instead of dequantized and quantized again (which would round
// through the model dtype and could move a scale). Block FP8: 128x128 blocks with float32 scales
// (not with --scale_format ue8m0: a source's scales need not be powers of two); FP8_BLOCK:
// 128x128 blocks with scales in the model dtype; FP8_DYNAMIC: one scale per row in the model
// dtype. Returns the weight and its scale, or nothing.
std::optional<std::pair<OutputTensor, OutputTensor>> passed_through(const TensorMapping& mapping, const OutputTensor& t,
                                                                   const std::string& module, const QuantizeSpec& spec) {
    if (!t.source_scales || t.lora_delta) return std::nullopt;
    const SourceScales& source = mapping.source_scales.at(*t.source_scales);
    if (source.codes != SourceCodes::Fp8E4M3) return std::nullopt;  // 4-bit codes: dequantized first
    const bool block = spec.scheme == QuantScheme::Fp8Block;
    const bool blocks_of_128 = source.block_rows == kBlock && source.block_cols == kBlock;
    bool same = false;
    if (block)
        same = blocks_of_128 && source.scales.source_dtype == DType::F32 && spec.scale_format == Fp8ScaleFormat::Float;
    else if (spec.scheme == QuantScheme::Fp8CtBlock)
        same = blocks_of_128 && source.scales.source_dtype == t.dtype;
    else if (spec.scheme == QuantScheme::Fp8Dynamic)
        same = source.block_rows == 1 && source.block_cols == t.shape[1] && source.scales.shape == Shape{t.shape[0], 1} &&
               source.scales.source_dtype == t.dtype;
    if (!same) return std::nullopt;
    OutputTensor weight = t;
    weight.source_scales.reset();
    weight.dtype = DType::F8_E4M3;
    weight.quantized_as_stored = true;
    OutputTensor scale = source.scales;
    scale.name = module + (block ? ".weight_scale_inv" : ".weight_scale");
    scale.quantized_as_stored = true;
    return std::pair{std::move(weight), std::move(scale)};
}

// Which candidate modules stay unquantized: the user's, and every part of a fused group one
// part of which the user left out (vLLM refuses a half-quantized qkv_proj or gate_up_proj).
// Block FP8 also: the modules with a partial 128x128 block, which transformers' dequantize-on-load
// (its path without an FP8 GPU) refuses; --fp8_full_blocks_only leaves them out as well.
// FP8_BLOCK: the modules whose input size is not a multiple of 128 (compressed-tensors only warns,
// but vLLM's block kernels need whole column blocks, lowbit-formats.md §4).
struct Fp8Selection {
    std::set<std::string> ignored_groups;
    size_t widened = 0;
    std::string widened_example;
    std::set<std::string> partial_blocks;
    size_t partial = 0;
    std::string partial_example;
    std::set<std::string> partial_columns;
    size_t indivisible = 0;
    std::string indivisible_example;
};

Fp8Selection select_groups(const TensorMapping& mapping, const IgnoredModules& ignored, const QuantizeSpec& spec) {
    Fp8Selection s;
    for (const OutputTensor& t : mapping.tensors) {
        if (!float_scheme_linear_name(t.name)) continue;
        const std::string module = module_of(t.name);
        const FusedPart part = fused_part(module);
        bool left_out = ignored.contains(module);
        if (spec.scheme == QuantScheme::Fp8Block && float_scheme_linear(t) && !left_out &&
            (t.shape[0] % kBlock != 0 || t.shape[1] % kBlock != 0)) {
            s.partial_blocks.insert(module);
            left_out = spec.fp8_full_blocks_only;
        }
        if (spec.scheme == QuantScheme::Fp8CtBlock && float_scheme_linear(t) && t.shape[1] % kBlock != 0) {
            s.partial_columns.insert(module);
            left_out = true;
        }
        if (!part.group.empty() && left_out) s.ignored_groups.insert(part.group);
    }
    return s;
}

}  // namespace

FusedPart fused_part(const std::string& module) {
    static const std::vector<std::tuple<std::string, std::string, bool>> parts{
        {"q_proj", "qkv", false},  {"k_proj", "qkv", false},          {"v_proj", "qkv", true},
        {"gate_proj", "gate_up", false}, {"up_proj", "gate_up", true}, {"q_a_proj", "qkv_a", false},
        {"kv_a_proj_with_mqa", "qkv_a", true}, {"w1", "w13", false},  {"w3", "w13", true}};
    const size_t dot = module.rfind('.');
    if (dot == std::string::npos) return {};
    const std::string last = module.substr(dot + 1);
    for (const auto& [name, group, is_last] : parts)
        if (last == name) return {module.substr(0, dot) + "|" + group, is_last};
    return {};
}

QuantizationPlan plan_fp8_quantization(TensorMapping& mapping, const QuantizeSpec& spec) {
    QuantizationPlan plan;
    plan.ignored_modules.push_back("lm_head");
    const IgnoredModules ignored(spec.ignore);
    Fp8Selection selection = select_groups(mapping, ignored, spec);
    ExpertSchemes experts;
    std::vector<QuantizedLinear> quantized_linears;
    std::vector<OutputTensor> out;
    for (OutputTensor& t : mapping.tensors) {
        plan.bytes_before += t.nbytes();
        const std::string module = t.name.ends_with(".weight") ? module_of(t.name) : "";
        const bool candidate = float_scheme_linear(t);
        bool quantized = candidate && !ignored.contains(module);
        if (quantized && selection.partial_columns.count(module)) {
            quantized = false;
            if (selection.indivisible++ == 0)
                selection.indivisible_example = module + " [" + std::to_string(t.shape[0]) + ", " +
                                                std::to_string(t.shape[1]) + "]";
        }
        const bool partial = quantized && selection.partial_blocks.count(module);
        if (quantized && !(partial && spec.fp8_full_blocks_only) && selection.ignored_groups.count(fused_part(module).group)) {
            quantized = false;
            if (selection.widened++ == 0) selection.widened_example = module;
        }
        if (quantized && partial) {  // written with partial blocks, or left out for them
            if (selection.partial++ == 0) selection.partial_example = module + " [" + std::to_string(t.shape[0]) + ", " +
                                                                       std::to_string(t.shape[1]) + "]";
            if (spec.fp8_full_blocks_only) quantized = false;
        }
        if (candidate) experts.add(module, quantized);
        if (!quantized) {
            // Every Linear a loader would expect in FP8 but that is not is named.
            if (linear_like(t) && module != "lm_head" && !module.empty()) plan.ignored_modules.push_back(module);
            plan.bytes_after += t.nbytes();
            out.push_back(std::move(t));
            continue;
        }
        if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
            throw Error(t.name + " is written as " + std::string(torch_name(t.dtype)) + "; --quantize=" +
                        quant_scheme_name(spec.scheme) + " quantizes bfloat16, float16 or float32 weights (--dtype)");
        quantized_linears.push_back({module, t.shape[0], t.shape[1]});
        if (auto kept = passed_through(mapping, t, module, spec)) {
            ++plan.passed_through;
            plan.bytes_after += kept->first.nbytes() + kept->second.nbytes();
            out.push_back(std::move(kept->first));
            out.push_back(std::move(kept->second));
            continue;
        }
        auto [weight, scale] = fp8_tensors(t, module, spec.scheme);
        weight.scale_tensor = out.size() + 1;
        plan.bytes_after += weight.nbytes() + scale.nbytes();
        out.push_back(std::move(weight));
        out.push_back(std::move(scale));
    }
    experts.check();
    mapping.tensors = std::move(out);
    if (plan.passed_through)
        plan.notes.push_back(std::to_string(plan.passed_through) + " FP8 source weights written as they are (codes and "
                             "scales bit for bit: the source is already in the --quantize=" +
                             quant_scheme_name(spec.scheme) + " scheme)");
    if (selection.widened)
        plan.notes.push_back(std::to_string(selection.widened) + " Linear modules left unquantized with the rest of their "
                             "fused group (vLLM loads q/k/v and gate/up as one layer, all FP8 or none), e.g. " +
                             selection.widened_example);
    if (selection.indivisible)
        plan.notes.push_back(std::to_string(selection.indivisible) + " Linear modules left unquantized: their input size "
                             "is not a multiple of 128 (FP8_BLOCK's blocks are 128 columns wide; vLLM's block kernels "
                             "take whole column blocks), e.g. " + selection.indivisible_example);
    if (selection.partial) {
        const std::string count = std::to_string(selection.partial);
        const std::string why = " (rows or columns not a multiple of 128), which transformers cannot dequantize on "
                                "a machine without an FP8 GPU (its dequantize-on-load needs whole 128x128 blocks), e.g. " +
                                selection.partial_example;
        plan.notes.push_back(spec.fp8_full_blocks_only
                                 ? count + " Linear modules left unquantized by --fp8_full_blocks_only: partial blocks" + why
                                 : count + " Linear modules written with partial 128x128 blocks" + why +
                                       "; vLLM and DeepSeek's code load them; --fp8_full_blocks_only leaves them unquantized");
    }
    if (spec.scheme == QuantScheme::Fp8Block || spec.scheme == QuantScheme::Fp8CtBlock)
        plan.shape_warnings = block_fp8_shape_warnings(quantized_linears);
    return plan;
}

nlohmann::ordered_json fp8_quantization_config(const QuantizeSpec& spec, const std::vector<std::string>& ignored) {
    if (spec.scheme == QuantScheme::Fp8Block) {
        nlohmann::ordered_json config = {{"quant_method", "fp8"},
                                         {"fmt", "e4m3"},
                                         {"activation_scheme", "dynamic"},
                                         {"weight_block_size", {kBlock, kBlock}}};
        // DeepSeek-V3.1's key for power-of-two block scales (transformers' FineGrainedFP8Config
        // takes "float" or "ue8m0"; vLLM's DeepGEMM path reads it).
        if (spec.scale_format == Fp8ScaleFormat::Ue8m0) config["scale_fmt"] = "ue8m0";
        config["modules_to_not_convert"] = ignored;
        config["ignored_layers"] = ignored;
        return config;
    }
    const bool ct_block = spec.scheme == QuantScheme::Fp8CtBlock;
    // FP8_DYNAMIC: weights per channel, activations per token; FP8_BLOCK: weights per 128x128
    // block, activations per group of 128 (compressed-tensors' presets, quant_scheme.py).
    auto args = [](const char* strategy, bool dynamic, int64_t group, bool block) {
        return nlohmann::ordered_json{
            {"num_bits", 8},
            {"type", "float"},
            {"symmetric", true},
            {"group_size", group ? nlohmann::ordered_json(group) : nlohmann::ordered_json(nullptr)},
            {"strategy", strategy},
            {"block_structure", block ? nlohmann::ordered_json{kBlock, kBlock} : nlohmann::ordered_json(nullptr)},
            {"dynamic", dynamic},
            {"actorder", nullptr},
            {"observer", dynamic ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json("minmax")},
            {"observer_kwargs", nlohmann::ordered_json::object()}};
    };
    return {{"quant_method", "compressed-tensors"},
            {"format", "float-quantized"},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}},
                {"weights", ct_block ? args("block", false, 0, true) : args("channel", false, 0, false)},
                {"input_activations", ct_block ? args("group", true, kBlock, false) : args("token", true, 0, false)},
                {"output_activations", nullptr}}}}},
            {"ignore", ignored},
            {"kv_cache_scheme", nullptr},
            {"global_compression_ratio", nullptr},
            {"sparsity_config", nlohmann::ordered_json::object()}};
}

}  // namespace vmerge
