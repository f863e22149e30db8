#include "formats/hf_safetensors/quantized_sources.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <string_view>

#include "architecture/hf_config.h"
#include "core/error.h"
#include "io/input_file.h"
#include "io/json_file.h"

namespace vmerge {
namespace {

constexpr const char* kScaleSuffix = ".weight_scale_inv";
constexpr int64_t kMaxBlock = int64_t{1} << 20;

bool one_byte_number(DType d) { return d == DType::F8_E4M3 || d == DType::F8_E5M2 || d == DType::U8 || d == DType::I8; }

// Tensor names quantized checkpoints add beside a weight (block FP8, GPT-OSS MXFP4,
// compressed-tensors): never plain model weights.
bool quantization_tensor_name(const std::string& name) {
    for (const char* suffix : {"_scale_inv", ".weight_scale", ".weight_packed", ".weight_global_scale", "_blocks",
                               "_scales", ".input_scale", ".input_global_scale", ".weight_zero_point", ".weight_shape"})
        if (name.ends_with(suffix)) return true;
    return false;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string shape_text(const Shape& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

void read_block_size(const nlohmann::json& q, SourceQuantization& out) {
    const std::string where = out.config_path + ": quantization_config.weight_block_size";
    const auto it = q.find("weight_block_size");
    if (it == q.end() || !it->is_array() || it->size() != 2)
        throw Error(where + ": expected [rows, columns] (block FP8 with one scale per tensor is not read)");
    out.block_rows = json_int_within((*it)[0], 1, kMaxBlock, where + "[0]");
    out.block_cols = json_int_within((*it)[1], 1, kMaxBlock, where + "[1]");
}

// compressed-tensors with FP8 weights in every config group, all of one strategy: the
// "float-quantized" (or "naive-quantized") format that FP8_DYNAMIC, FP8_BLOCK and FP8 per tensor
// are saved in. Anything else leaves the strategy empty (its tensors are then refused by name).
void read_compressed_fp8(const nlohmann::json& q, SourceQuantization& out) {
    const auto format = q.find("format");
    if (format == q.end() || !format->is_string() ||
        (format->get<std::string>() != "float-quantized" && format->get<std::string>() != "naive-quantized"))
        return;
    const auto groups = q.find("config_groups");
    if (groups == q.end() || !groups->is_object() || groups->empty()) return;
    std::string strategy;
    for (const auto& [name, group] : groups->items()) {
        const auto w = group.find("weights");
        if (!group.is_object() || w == group.end() || !w->is_object()) return;
        if (w->value("type", "") != "float" || !w->contains("num_bits") || !(*w)["num_bits"].is_number_integer() ||
            (*w)["num_bits"].get<int64_t>() != 8)
            return;
        const std::string s = w->value("strategy", "");
        if (s != "channel" && s != "tensor" && s != "block") return;
        if (!strategy.empty() && s != strategy) return;  // one rule for every FP8 weight
        strategy = s;
        if (s != "block") continue;
        const std::string where = out.config_path + ": quantization_config.config_groups." + name + ".weights.block_structure";
        const auto block = w->find("block_structure");
        if (block == w->end() || !block->is_array() || block->size() != 2) throw Error(where + ": expected [rows, columns]");
        const int64_t rows = json_int_within((*block)[0], 1, kMaxBlock, where + "[0]");
        const int64_t cols = json_int_within((*block)[1], 1, kMaxBlock, where + "[1]");
        if (out.block_rows && (rows != out.block_rows || cols != out.block_cols)) return;
        out.block_rows = rows;
        out.block_cols = cols;
    }
    out.compressed_fp8_strategy = strategy;
}

// compressed-tensors NVFP4A16 / MXFP4A16 ("nvfp4-pack-quantized" / "mxfp4-pack-quantized"): 4-bit
// float weights in every config group, symmetric, in groups of 16 (tensor_group, F8_E4M3 scales and
// a global scale) or 32 (group, UE8M0 scales as uint8). Anything else leaves the scheme empty
// (its tensors are then refused by name).
void read_compressed_fp4(const nlohmann::json& q, SourceQuantization& out) {
    const auto format = q.find("format");
    if (format == q.end() || !format->is_string()) return;
    const std::string f = format->get<std::string>();
    const bool nvfp4 = f == "nvfp4-pack-quantized";
    if (!nvfp4 && f != "mxfp4-pack-quantized") return;
    const int64_t group = nvfp4 ? 16 : 32;
    const auto groups = q.find("config_groups");
    if (groups == q.end() || !groups->is_object() || groups->empty()) return;
    for (const auto& [name, config_group] : groups->items()) {
        if (!config_group.is_object()) return;
        const auto w = config_group.find("weights");
        if (w == config_group.end() || !w->is_object()) return;
        const auto bits = w->find("num_bits");
        const auto size = w->find("group_size");
        if (bits == w->end() || !bits->is_number_integer() || bits->get<int64_t>() != 4) return;
        if (size == w->end() || !size->is_number_integer() || size->get<int64_t>() != group) return;
        if (w->value("type", "") != "float" || !w->value("symmetric", true)) return;
        if (w->value("strategy", "") != (nvfp4 ? "tensor_group" : "group")) return;
        const auto scale_dtype = w->find("scale_dtype");
        if (scale_dtype != w->end() && !scale_dtype->is_null() &&
            *scale_dtype != (nvfp4 ? "torch.float8_e4m3fn" : "torch.uint8"))
            return;
    }
    out.compressed_fp4 = nvfp4 ? "nvfp4" : "mxfp4";
    out.fp4_group = group;
}

// The scale grid of an FP8 weight [N, K] and the block each scale covers, by the source's scheme.
struct ScaleGrid {
    Shape shape;
    int64_t block_rows, block_cols;
};

ScaleGrid scale_grid(const Shape& w, const SourceQuantization& q) {
    const int64_t n = w[0], k = w[1];
    if (q.compressed_fp8_strategy == "channel") return {{n, 1}, 1, k};
    if (q.compressed_fp8_strategy == "tensor") return {{1}, n, k};
    return {{ceil_div(n, q.block_rows), ceil_div(k, q.block_cols)}, q.block_rows, q.block_cols};
}

// The error for a tensor of a quantized scheme vmerge does not read.
[[noreturn]] void refuse_scheme(const std::string& tensor, const SourceQuantization& q, const std::string& why) {
    const std::string scheme = q.quant_method.empty() ? "no quantization_config" : "quant_method '" + q.quant_method + "'";
    throw Error(tensor + ": " + why + ", and " + q.config_path + " has " + scheme +
                "; vmerge reads quantized weights only in block FP8 (quant_method \"fp8\" with weight_block_size, "
                "<m>.weight F8_E4M3 + <m>.weight_scale_inv F32), compressed-tensors FP8 (float-quantized: "
                "<m>.weight F8_E4M3 + <m>.weight_scale), compressed-tensors NVFP4A16/MXFP4A16 "
                "(nvfp4-pack-quantized / mxfp4-pack-quantized: <m>.weight_packed U8 + <m>.weight_scale "
                "[+ <m>.weight_global_scale]) and GPT-OSS MXFP4 (quant_method \"mxfp4\": <p>_blocks U8 + <p>_scales U8)");
}

ScaleGrid check_scale(const OutputTensor& weight, const OutputTensor& scale, const SourceQuantization& q) {
    if (weight.shape.size() != 2)
        throw Error(weight.name + ": an FP8 weight of shape " + shape_text(weight.shape) + "; expected 2 dimensions");
    const ScaleGrid grid = scale_grid(weight.shape, q);
    const bool single = q.compressed_fp8_strategy == "tensor" && numel(scale.shape) == 1;  // [1] or [1, 1]
    if (scale.shape != grid.shape && !single)
        throw Error(scale.name + ": shape " + shape_text(scale.shape) + ", expected " + shape_text(grid.shape) + " (" +
                    weight.name + " " + shape_text(weight.shape) + " in blocks of " + std::to_string(grid.block_rows) +
                    "x" + std::to_string(grid.block_cols) + ", as " + q.config_path + " states)");
    if (scale.source_dtype != DType::F32 && scale.source_dtype != DType::BF16 && scale.source_dtype != DType::F16)
        throw Error(scale.name + ": dtype " + std::string(safetensors_name(scale.source_dtype)) +
                    ", expected F32, BF16 or F16 (FP8 scales)");
    if (weight.copies.size() != 1 || scale.copies.size() != 1)
        throw Error("internal: " + weight.name + " is not copied whole from one source tensor");
    return grid;
}

// The one float of NVFP4's <m>.weight_global_scale, read from its file (a few bytes, while planning:
// whether the parts of a fused group share it decides their pass-through).
float read_global_scale(const TensorMapping& mapping, const OutputTensor& global, const std::string& config_path) {
    if (global.source_dtype != DType::F32 || numel(global.shape) != 1 || global.copies.size() != 1)
        throw Error(global.name + ": dtype " + std::string(safetensors_name(global.source_dtype)) + ", shape " +
                    shape_text(global.shape) + "; expected one F32 value (NVFP4 global scale, " + config_path + ")");
    const TensorRef& ref = mapping.sources.at(global.copies[0].source);
    float value = 0;
    InputFile(ref.storage.file).read_exact(ref.storage.byte_offset, &value, sizeof value, global.name.c_str());
    if (!std::isfinite(value) || value <= 0)
        throw Error(global.name + ": " + std::to_string(value) +
                    "; an NVFP4 global scale must be finite and positive (the file is damaged)");
    return value;
}

// Pairs each compressed-tensors NVFP4/MXFP4 <m>.weight_packed with its scales (marked consumed)
// and turns it into <m>.weight [N, 2·K/2] dequantized on the way. Returns how many.
size_t attach_fp4_scales(TensorMapping& mapping, const SourceQuantization& q, const std::map<std::string, size_t>& index,
                         std::vector<char>& consumed) {
    if (q.compressed_fp4.empty()) return 0;
    const bool nvfp4 = q.compressed_fp4 == "nvfp4";
    const std::string scheme = nvfp4 ? "NVFP4" : "MXFP4";
    size_t attached = 0;
    for (size_t i = 0; i < mapping.tensors.size(); ++i) {
        OutputTensor& t = mapping.tensors[i];
        if (!t.name.ends_with(".weight_packed")) continue;
        const std::string module = t.name.substr(0, t.name.size() - std::string_view(".weight_packed").size());
        if (t.source_dtype != DType::U8 || t.shape.size() != 2 || t.copies.size() != 1)
            throw Error(t.name + ": dtype " + std::string(safetensors_name(t.source_dtype)) + ", shape " +
                        shape_text(t.shape) + "; expected U8 [out, in/2] (" + scheme + " codes, " + q.config_path + ")");
        const int64_t rows = t.shape[0], cols = 2 * t.shape[1];
        if (cols % q.fp4_group != 0)
            throw Error(t.name + ": " + std::to_string(cols) + " input columns, not a multiple of the " + scheme +
                        " group of " + std::to_string(q.fp4_group));
        if (index.count(module + ".weight"))
            throw Error(t.name + ": the checkpoint also holds " + module + ".weight; expected one or the other");
        const auto s = index.find(module + ".weight_scale");
        if (s == index.end())
            throw Error(t.name + ": " + scheme + " codes without their " + module + ".weight_scale (" + q.config_path +
                        "): the checkpoint is incomplete");
        const OutputTensor& scale = mapping.tensors[s->second];
        const Shape grid{rows, cols / q.fp4_group};
        const DType scale_dtype = nvfp4 ? DType::F8_E4M3 : DType::U8;
        if (scale.shape != grid || scale.source_dtype != scale_dtype || scale.copies.size() != 1)
            throw Error(scale.name + ": " + std::string(safetensors_name(scale.source_dtype)) + " " +
                        shape_text(scale.shape) + ", expected " + std::string(safetensors_name(scale_dtype)) + " " +
                        shape_text(grid) + " (" + scheme + ": one scale per " + std::to_string(q.fp4_group) +
                        " inputs of " + t.name + " " + shape_text(t.shape) + ", " + q.config_path + ")");
        SourceScales source{scale, 1, q.fp4_group, nvfp4 ? SourceCodes::Nvfp4 : SourceCodes::Mxfp4, std::nullopt, 1.0f};
        consumed[s->second] = 1;
        if (nvfp4) {
            const auto g = index.find(module + ".weight_global_scale");
            if (g == index.end())
                throw Error(t.name + ": NVFP4 codes without their " + module + ".weight_global_scale (" + q.config_path +
                            "): the checkpoint is incomplete");
            source.global_scale = mapping.tensors[g->second];
            source.global_scale_value = read_global_scale(mapping, *source.global_scale, q.config_path);
            consumed[g->second] = 1;
        }
        mapping.source_scales.push_back(std::move(source));
        t.source_scales = mapping.source_scales.size() - 1;
        t.name = module + ".weight";
        t.shape = {rows, cols};
        t.packed_codes_shape = {rows, cols / 2};
        t.dtype = q.model_dtype;
        ++attached;
    }
    return attached;
}

// Pairs each GPT-OSS <p>_blocks [E, N, K/32, 16] with its <p>_scales [E, N, K/32] (marked consumed)
// and turns it into <p> [E, K, N], the orientation transformers' dequantizer gives. Returns how many.
size_t attach_gpt_oss_scales(TensorMapping& mapping, const SourceQuantization& q,
                             const std::map<std::string, size_t>& index, std::vector<char>& consumed) {
    if (!q.gpt_oss_mxfp4()) return 0;
    size_t attached = 0;
    for (size_t i = 0; i < mapping.tensors.size(); ++i) {
        OutputTensor& t = mapping.tensors[i];
        if (!t.name.ends_with("_blocks")) continue;
        const std::string weight = t.name.substr(0, t.name.size() - std::string_view("_blocks").size());
        if (t.source_dtype != DType::U8 || t.shape.size() != 4 || t.shape[3] != 16 || t.copies.size() != 1)
            throw Error(t.name + ": dtype " + std::string(safetensors_name(t.source_dtype)) + ", shape " +
                        shape_text(t.shape) + "; expected U8 [experts, out, in/32, 16] (GPT-OSS MXFP4 blocks, " +
                        q.config_path + ")");
        if (index.count(weight))
            throw Error(t.name + ": the checkpoint also holds " + weight + "; expected one or the other");
        const auto s = index.find(weight + "_scales");
        if (s == index.end())
            throw Error(t.name + ": GPT-OSS MXFP4 blocks without their " + weight + "_scales (" + q.config_path +
                        "): the checkpoint is incomplete");
        const OutputTensor& scale = mapping.tensors[s->second];
        const Shape grid{t.shape[0], t.shape[1], t.shape[2]};
        if (scale.shape != grid || scale.source_dtype != DType::U8 || scale.copies.size() != 1)
            throw Error(scale.name + ": " + std::string(safetensors_name(scale.source_dtype)) + " " +
                        shape_text(scale.shape) + ", expected U8 " + shape_text(grid) +
                        " (one UE8M0 exponent per 32 inputs of " + t.name + " " + shape_text(t.shape) + ")");
        SourceScales source{scale, 1, 32, SourceCodes::Mxfp4, std::nullopt, 1.0f, true};
        consumed[s->second] = 1;
        mapping.source_scales.push_back(std::move(source));
        t.source_scales = mapping.source_scales.size() - 1;
        t.packed_codes_shape = t.shape;
        t.name = weight;
        t.shape = {t.shape[0], t.shape[2] * 32, t.shape[1]};
        t.dtype = q.model_dtype;
        ++attached;
    }
    return attached;
}

}  // namespace

SourceQuantization read_source_quantization(const std::string& dir) {
    SourceQuantization out;
    out.config_path = dir + "/config.json";
    if (!std::filesystem::exists(out.config_path)) return out;
    const HfConfig config = load_hf_config(dir);
    if (config.dtype) out.model_dtype = *config.dtype;
    const auto q = config.json.find("quantization_config");
    if (q == config.json.end() || q->is_null()) return out;
    if (!q->is_object()) throw Error(out.config_path + ": quantization_config: expected an object");
    const auto method = q->find("quant_method");
    out.quant_method = method != q->end() && method->is_string() ? method->get<std::string>() : "(none)";
    if (out.quant_method == "compressed-tensors") {
        read_compressed_fp8(*q, out);
        read_compressed_fp4(*q, out);
    }
    if (out.block_fp8()) {
        const auto format = q->find("fmt");
        if (format != q->end() && format->is_string() && format->get<std::string>() != "e4m3")
            throw Error(out.config_path + ": quantization_config.fmt '" + format->get<std::string>() +
                        "': vmerge reads block FP8 in e4m3 only");
        read_block_size(*q, out);
    }
    return out;
}

std::string attach_source_scales(TensorMapping& mapping, const SourceQuantization& q) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < mapping.tensors.size(); ++i) index[mapping.tensors[i].name] = i;
    std::vector<char> consumed(mapping.tensors.size(), 0);
    const size_t fp4 = attach_fp4_scales(mapping, q, index, consumed);
    const size_t gpt_oss = attach_gpt_oss_scales(mapping, q, index, consumed);
    size_t dequantized = 0;
    for (size_t i = 0; i < mapping.tensors.size(); ++i) {
        OutputTensor& t = mapping.tensors[i];
        if (consumed[i] || !t.packed_codes_shape.empty()) continue;
        if (q.gpt_oss_mxfp4() && t.name.ends_with("_scales"))
            throw Error(t.name + ": GPT-OSS MXFP4 scales whose blocks " + t.name.substr(0, t.name.size() - 7) +
                        "_blocks are not in the checkpoint (" + q.config_path + ")");
        if (!q.compressed_fp4.empty() && (t.name.ends_with(".weight_scale") || t.name.ends_with(".weight_global_scale")))
            throw Error(t.name + ": a 4-bit float scale whose codes " + t.name.substr(0, t.name.rfind('.')) +
                        ".weight_packed are not in the checkpoint (" + q.config_path + ")");
        const bool float8 = t.source_dtype == DType::F8_E4M3 || t.source_dtype == DType::F8_E5M2;
        if (t.source_dtype == DType::F8_E4M3 && (q.block_fp8() || q.compressed_fp8())) {
            if (!t.name.ends_with(".weight")) refuse_scheme(t.name, q, "a float8_e4m3fn tensor that is not a <m>.weight");
            const std::string scale_name = t.name + (q.block_fp8() ? "_scale_inv" : "_scale");
            const auto s = index.find(scale_name);
            if (s == index.end())
                throw Error(t.name + ": a float8_e4m3fn weight without its " + scale_name + " (" +
                            (q.block_fp8() ? "block FP8, " : "compressed-tensors FP8, ") + q.config_path +
                            "): the checkpoint is incomplete");
            const OutputTensor& scale = mapping.tensors[s->second];
            const ScaleGrid grid = check_scale(t, scale, q);
            consumed[s->second] = 1;
            mapping.source_scales.push_back(SourceScales::block_grid(scale, grid.block_rows, grid.block_cols));
            t.source_scales = mapping.source_scales.size() - 1;
            t.dtype = q.model_dtype;
            ++dequantized;
        } else if (float8 || (one_byte_number(t.source_dtype) && !q.quant_method.empty())) {
            // A one-byte tensor is only read as a number when the config says how it is scaled.
            refuse_scheme(t.name, q, "a " + std::string(torch_name(t.source_dtype)) + " tensor");
        }
    }
    for (size_t i = 0; i < mapping.tensors.size(); ++i) {
        const OutputTensor& t = mapping.tensors[i];
        if (consumed[i] || !quantization_tensor_name(t.name) || q.quant_method.empty()) continue;
        if ((q.block_fp8() && t.name.ends_with(kScaleSuffix)) || (q.compressed_fp8() && t.name.ends_with(".weight_scale")))
            throw Error(t.name + ": an FP8 scale whose weight " + t.name.substr(0, t.name.rfind('.')) +
                        ".weight is not float8_e4m3fn (" + q.config_path + ")");
        refuse_scheme(t.name, q, "a quantization tensor vmerge does not read");
    }
    std::vector<OutputTensor> kept;
    kept.reserve(mapping.tensors.size());
    for (size_t i = 0; i < mapping.tensors.size(); ++i)
        if (!consumed[i]) kept.push_back(std::move(mapping.tensors[i]));
    mapping.tensors = std::move(kept);
    if (gpt_oss)
        return std::to_string(gpt_oss) + " GPT-OSS MXFP4 expert tensors (" + q.config_path + ") dequantized as "
               "transformers' Mxfp4 dequantizer does: e2m1 value x 2^(scale - 127), rounded to bfloat16, written "
               "[experts, in, out]" +
               (q.model_dtype == DType::BF16 ? std::string() : ", as " + std::string(torch_name(q.model_dtype)));
    if (fp4)
        return std::to_string(fp4) + " compressed-tensors " + (q.compressed_fp4 == "nvfp4" ? "NVFP4" : "MXFP4") +
               " weights (" + q.config_path + ") dequantized as compressed-tensors' decompressor does: e2m1 value x " +
               (q.compressed_fp4 == "nvfp4" ? "(float32 weight_scale / weight_global_scale)" : "2^(weight_scale - 127)") +
               " in float32, rounded to bfloat16" +
               (q.model_dtype == DType::BF16 ? std::string() : ", then written as " + std::string(torch_name(q.model_dtype)));
    if (!dequantized) return {};
    if (q.compressed_fp8())
        return std::to_string(dequantized) + " compressed-tensors FP8 weights (" + q.compressed_fp8_strategy + " scales, " +
               q.config_path + ") dequantized: float32(code) x weight_scale, rounded once to " +
               std::string(torch_name(q.model_dtype));
    return std::to_string(dequantized) + " block-FP8 weights (" + std::to_string(q.block_rows) + "x" +
           std::to_string(q.block_cols) + " blocks, " + q.config_path + ") dequantized: float32(code) x weight_scale_inv, "
           "rounded once to " + std::string(torch_name(q.model_dtype));
}

}  // namespace vmerge
