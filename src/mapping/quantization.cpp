#include "mapping/quantization.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "core/text_pattern.h"
#include "core/error.h"
#include "mapping/fp4_quantization.h"
#include "mapping/fp8_quantization.h"
#include "mapping/quantization_selection.h"

namespace vmerge {
namespace {

bool quantizable_name(const std::string& name) {
    static const TextPattern linear(R"(model\.layers\..*(_proj|\.w[123])\.weight)");
    return linear.full_match(name);
}

}  // namespace

std::optional<QuantScheme> parse_quant_scheme(const std::string& text) {
    if (text == "int") return QuantScheme::Int;
    if (text == "fp8") return QuantScheme::Fp8Block;
    if (text == "fp8-dynamic" || text == "fp8_dynamic") return QuantScheme::Fp8Dynamic;
    if (text == "fp8-block" || text == "fp8_block") return QuantScheme::Fp8CtBlock;
    if (text == "nvfp4") return QuantScheme::Nvfp4;
    if (text == "mxfp4") return QuantScheme::Mxfp4;
    return std::nullopt;
}

std::string quant_scheme_name(QuantScheme scheme) {
    switch (scheme) {
        case QuantScheme::Fp8Block: return "fp8";
        case QuantScheme::Fp8Dynamic: return "fp8-dynamic";
        case QuantScheme::Fp8CtBlock: return "fp8-block";
        case QuantScheme::Nvfp4: return "nvfp4";
        case QuantScheme::Mxfp4: return "mxfp4";
        default: return "int";
    }
}

std::string quantization_description(const QuantizeSpec& spec) {
    switch (spec.scheme) {
        case QuantScheme::Fp8Block:
            return spec.scale_format == Fp8ScaleFormat::Ue8m0
                       ? "FP8 e4m3 with a power-of-two (UE8M0) float32 scale per 128x128 block (--quantize=fp8 "
                         "--scale_format ue8m0)"
                       : "FP8 e4m3 with a float32 scale per 128x128 block (--quantize=fp8)";
        case QuantScheme::Fp8CtBlock:
            return "FP8 e4m3 with a scale per 128x128 block in the weight dtype, FP8_BLOCK (--quantize=fp8-block)";
        case QuantScheme::Fp8Dynamic:
            return "FP8 e4m3 with a scale per output channel, FP8_DYNAMIC (--quantize=fp8-dynamic)";
        case QuantScheme::Nvfp4:
            return "FP4 e2m1 with an FP8 e4m3 scale per 16 inputs and a float32 global scale, NVFP4A16 "
                   "(--quantize=nvfp4)";
        case QuantScheme::Mxfp4:
            return "FP4 e2m1 with a UE8M0 scale per 32 inputs, MXFP4A16 (--quantize=mxfp4)";
        default:
            return std::to_string(spec.bits) + " bits (" +
                   (spec.group_size ? "groups of " + std::to_string(spec.group_size) : std::string("per channel")) +
                   ", " + (spec.symmetric ? "symmetric" : "asymmetric") + ")";
    }
}

QuantizationParameters quantization_parameters(const QuantizeSpec& spec) {
    QuantizationParameters p;
    switch (spec.scheme) {
        case QuantScheme::Fp8Block:
            p = {"float8_e4m3fn", 8, "block", 0, {128, 128}, "float32",
                 spec.scale_format == Fp8ScaleFormat::Ue8m0 ? "ue8m0" : "float"};
            break;
        case QuantScheme::Fp8CtBlock: p = {"float8_e4m3fn", 8, "block", 0, {128, 128}, "", ""}; break;
        case QuantScheme::Fp8Dynamic: p = {"float8_e4m3fn", 8, "channel", 0, {}, "", ""}; break;
        case QuantScheme::Nvfp4: p = {"float4_e2m1", 4, "tensor_group", kNvfp4Group, {}, "float8_e4m3fn", ""}; break;
        case QuantScheme::Mxfp4: p = {"float4_e2m1", 4, "group", kMxfp4Group, {}, "ue8m0", ""}; break;
        default:
            p = {"int" + std::to_string(spec.bits), spec.bits, spec.group_size ? "group" : "channel", spec.group_size,
                 {}, "", ""};
            p.symmetric = spec.symmetric;
    }
    p.global_scale = spec.scheme == QuantScheme::Nvfp4;
    return p;
}

std::string unsupported_by_vllm(const QuantizeSpec& spec) {
    if (spec.bits != 4 && spec.bits != 8)
        return "--bits " + std::to_string(spec.bits) + ": vLLM's WNA16 kernels take 4 or 8 bits";
    const int64_t g = spec.group_size;
    if (g != 0 && g != 32 && g != 64 && g != 128)
        return "--group_size " + std::to_string(g) + ": no vLLM kernel runs it (compressed-tensors WNA16: Marlin takes "
               "group sizes -1 (per channel, --group_size 0), 32, 64, 128; Machete -1, 64, 128; Conch -1, 128)";
    return "";
}

std::string quantized_kind(const std::string& name) {
    static const TextPattern numbers(R"(\.\d+\.)");
    std::string kind = name;
    if (kind.starts_with("model.layers.")) kind = kind.substr(kind.find('.', 13) + 1);
    kind = numbers.replace_all(kind, ".*.");
    for (const char* suffix : {".weight_packed", ".weight"})
        if (kind.ends_with(suffix)) kind.resize(kind.size() - std::strlen(suffix));
    return kind;
}

std::string quantized_weight_name(const std::string& name) {
    return name.ends_with(".weight_packed") ? name.substr(0, name.size() - 7) : name;
}

QuantizationPlan plan_quantization(TensorMapping& mapping, const QuantizeSpec& spec) {
    if (spec.scheme == QuantScheme::Nvfp4 || spec.scheme == QuantScheme::Mxfp4)
        return plan_fp4_quantization(mapping, spec);
    if (spec.scheme != QuantScheme::Int) return plan_fp8_quantization(mapping, spec);
    if (spec.bits != 4 && spec.bits != 8) throw Error("--bits " + std::to_string(spec.bits) + ": expected 4 or 8");
    if (spec.group_size < 0) throw Error("--group_size must be 0 (per channel) or positive");
    QuantizationPlan plan;
    if (const std::string why = unsupported_by_vllm(spec); !why.empty()) {
        if (!spec.allow_unsupported)
            throw Error(why + "; use --group_size 32, 64, 128 or 0, or pass --allow_unsupported_quantization to write "
                        "it anyway");
        plan.notes.push_back(why + "; written anyway (--allow_unsupported_quantization): vLLM will not load it");
    }
    ExpertSchemes experts;
    plan.ignored_modules.push_back("lm_head");
    std::vector<OutputTensor> out;
    size_t skipped_group = 0;
    const IgnoredModules ignored(spec.ignore);
    for (OutputTensor& t : mapping.tensors) {
        plan.bytes_before += t.nbytes();
        const std::string module = t.name.ends_with(".weight") ? module_of(t.name) : "";
        const bool candidate = quantizable_name(t.name) && t.shape.size() == 2 && is_floating(t.dtype);
        const int64_t rows = candidate ? t.shape[0] : 0, cols = candidate ? t.shape[1] : 0;
        const int64_t group = spec.group_size ? spec.group_size : cols;
        const bool divisible = candidate && cols > 0 && cols % group == 0;
        const bool quantized = candidate && divisible && !ignored.contains(module);
        if (candidate) experts.add(module, quantized);
        if (!quantized) {
            if (candidate && !divisible) ++skipped_group;
            // Every Linear a "Linear" target matches but that is not quantized (router gates,
            // a value model's score head, ...) is named, or loaders expect weight_packed.
            if (linear_like(t) && module != "lm_head" && !module.empty()) plan.ignored_modules.push_back(module);
            plan.bytes_after += t.nbytes();
            out.push_back(std::move(t));
            continue;
        }
        const int64_t groups = cols / group;
        const int64_t per_word = 32 / spec.bits;
        OutputTensor packed;
        packed.name = module + ".weight_packed";
        packed.role = OutputTensor::Role::QuantPacked;
        packed.source_dtype = t.source_dtype;
        packed.dtype = DType::I32;
        packed.source_shape = t.shape;
        packed.shape = {rows, (cols + per_word - 1) / per_word};
        packed.copies = std::move(t.copies);
        packed.zero_fill = t.zero_fill;
        packed.value_offset = t.value_offset;
        packed.lora_delta = t.lora_delta;  // a LoRA merge comes before quantization
    packed.source_scales = t.source_scales;  // and a quantized source is dequantized first
    packed.packed_codes_shape = t.packed_codes_shape;
        packed.quantize_from = t.dtype;
        // Zero points are packed along rows, so a rank or block boundary must not split a word.
        packed.row_align = spec.symmetric ? 1 : per_word;

        OutputTensor scale;
        scale.name = module + ".weight_scale";
        scale.role = OutputTensor::Role::QuantScale;
        scale.source_dtype = scale.dtype = t.dtype;  // the model's float dtype
        scale.shape = {rows, groups};

        OutputTensor shape;
        shape.name = module + ".weight_shape";
        shape.role = OutputTensor::Role::Constant;
        shape.source_dtype = shape.dtype = DType::I64;
        shape.shape = {2};
        shape.constant.resize(16);
        std::memcpy(shape.constant.data(), &rows, 8);
        std::memcpy(shape.constant.data() + 8, &cols, 8);

        const size_t base = out.size();
        packed.scale_tensor = base + 1;
        out.push_back(std::move(packed));
        out.push_back(std::move(scale));
        if (!spec.symmetric) {
            OutputTensor zero;
            zero.name = module + ".weight_zero_point";
            zero.role = OutputTensor::Role::QuantZeroPoint;
            zero.source_dtype = zero.dtype = DType::I32;
            zero.shape = {(rows + per_word - 1) / per_word, groups};
            out[base].zero_point_tensor = out.size();
            out.push_back(std::move(zero));
        }
        out.push_back(std::move(shape));
        for (size_t i = base; i < out.size(); ++i) plan.bytes_after += out[i].nbytes();
    }
    experts.check();
    mapping.tensors = std::move(out);
    if (skipped_group)
        plan.notes.push_back(std::to_string(skipped_group) + " Linear weights left unquantized: their input size is not a "
                             "multiple of --group_size " + std::to_string(spec.group_size));
    return plan;
}

nlohmann::ordered_json quantization_config(const QuantizeSpec& spec, const std::vector<std::string>& ignored) {
    if (spec.scheme == QuantScheme::Nvfp4 || spec.scheme == QuantScheme::Mxfp4)
        return fp4_quantization_config(spec, ignored);
    if (spec.scheme != QuantScheme::Int) return fp8_quantization_config(spec, ignored);
    nlohmann::ordered_json weights = {
        {"num_bits", spec.bits},
        {"type", "int"},
        {"symmetric", spec.symmetric},
        {"group_size", spec.group_size ? nlohmann::ordered_json(spec.group_size) : nlohmann::ordered_json(nullptr)},
        {"strategy", spec.group_size ? "group" : "channel"},
        {"block_structure", nullptr},
        {"dynamic", false},
        {"actorder", nullptr},
        {"observer", "minmax"},
        {"observer_kwargs", nlohmann::ordered_json::object()}};
    return {{"quant_method", "compressed-tensors"},
            {"format", "pack-quantized"},
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
