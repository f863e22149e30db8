#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor_mapping.h"

namespace vmerge {

// The layouts --quantize writes: compressed-tensors `pack-quantized` int4/int8
// (docs/reference/output-formats.md §3, vLLM's WNA16 kernels), block FP8 (`quant_method: fp8`,
// DeepSeek-V3 / Qwen3-*-FP8) and compressed-tensors FP8_DYNAMIC (`float-quantized`),
// docs/reference/fp8-formats.md §2 and §3; compressed-tensors FP8_BLOCK (`float-quantized`, Fp8CtBlock),
// NVFP4A16 (`nvfp4-pack-quantized`) and MXFP4A16 (`mxfp4-pack-quantized`),
// docs/reference/lowbit-formats.md §4, §2.2 and §3.
enum class QuantScheme { Int, Fp8Block, Fp8Dynamic, Fp8CtBlock, Nvfp4, Mxfp4 };
// The --quantize values: "int", "fp8", "fp8-dynamic" (also "fp8_dynamic"), "fp8-block" (also
// "fp8_block"), "nvfp4", "mxfp4".
std::optional<QuantScheme> parse_quant_scheme(const std::string& text);
std::string quant_scheme_name(QuantScheme scheme);

// How --quantize=fp8 stores its block scales (--scale_format): float32 amax/448 as computed, or
// that rounded up to a power of two (UE8M0, DeepGEMM / DeepSeek-V3.1; still float32 tensors,
// config `scale_fmt: "ue8m0"`), docs/reference/lowbit-formats.md §5.
enum class Fp8ScaleFormat { Float, Ue8m0 };

// The 4-bit float schemes' groups along the input dimension.
constexpr int64_t kNvfp4Group = 16;
constexpr int64_t kMxfp4Group = 32;

// Weight-only round-to-nearest quantization of the Linear weights.
struct QuantizeSpec {
    QuantScheme scheme = QuantScheme::Int;
    // Int only:
    int bits = 4;               // 4 or 8
    int64_t group_size = 128;   // along the input dimension; 0 = one group per row (channel)
    bool symmetric = true;
    std::vector<std::string> ignore;  // extra names (exact module names or "re:" regexes)
    bool allow_unsupported = false;   // --allow_unsupported_quantization: write what no vLLM kernel runs
    // Block FP8 only (--fp8_full_blocks_only): leave every Linear with a partial 128x128 block
    // (rows or columns not a multiple of 128) unquantized, with the rest of its fused group, so
    // transformers' dequantize-on-load (no FP8 GPU) loads the folder
    // (docs/reference/fp8-formats.md §2.4).
    bool fp8_full_blocks_only = false;
    Fp8ScaleFormat scale_format = Fp8ScaleFormat::Float;  // block FP8 only (--scale_format)
};

// Why no vLLM WNA16 kernel (compressed-tensors pack-quantized) runs `spec`, empty when one does:
// the bits and group size each kernel takes (vLLM marlin_utils MARLIN_SUPPORTED_GROUP_SIZES
// [-1, 32, 64, 128]; Machete [-1, 64, 128]; Conch [-1, 128]; types uint4b8/uint8b128).
std::string unsupported_by_vllm(const QuantizeSpec& spec);

// "4 bits (groups of 128, symmetric)", "FP8 e4m3, 128x128 blocks (fp8)", for reports.
std::string quantization_description(const QuantizeSpec& spec);

// What a scheme writes, as its parameters (inspect's report): the element type, how many inputs
// (or which block) share a scale, the scale's type, and whether a global scale is written.
struct QuantizationParameters {
    std::string element;        // "int4", "int8", "float8_e4m3fn", "float4_e2m1"
    int bits = 0;               // of the element
    std::string strategy;       // compressed-tensors' name: "group", "channel", "block", "tensor_group"
    int64_t group_size = 0;     // inputs per scale along a row ("group", "tensor_group"); 0 otherwise
    std::vector<int64_t> block; // [rows, columns] per scale ("block"); empty otherwise
    // "float32", "float8_e4m3fn", "ue8m0" (a uint8 power-of-two exponent); empty where the scale
    // is stored in the weight dtype (int, FP8_DYNAMIC, FP8_BLOCK), which the caller knows.
    std::string scale_dtype;
    // Block FP8 only: "float" (amax / 448 as computed) or "ue8m0" (rounded up to a power of two,
    // still float32 tensors); empty for the other schemes.
    std::string scale_format;
    bool symmetric = true;      // false: int with zero points (--asymmetric)
    bool global_scale = false;  // NVFP4: one float32 global scale per weight
};
QuantizationParameters quantization_parameters(const QuantizeSpec& spec);

struct QuantizationPlan {
    std::vector<std::string> ignored_modules;  // Linear modules left unquantized (config `ignore`)
    std::vector<std::string> notes;
    // Block FP8: the shape rules of vLLM's loader the model breaks, one line per rule
    // (fp8_shape_rules.h); the file is written anyway.
    std::vector<std::string> shape_warnings;
    uint64_t bytes_before = 0;
    uint64_t bytes_after = 0;
    size_t passed_through = 0;  // block-FP8 source weights written as they are (fp8_quantization.h)
};

// Replaces every quantizable Linear weight `<p>.weight` [out, in] by `<p>.weight_packed`,
// `<p>.weight_scale`, `<p>.weight_shape` (and `<p>.weight_zero_point` when asymmetric).
// Embeddings, norms, router gates, heads and weights whose input size is not a multiple of the
// group stay as they are; every Linear left unquantized (a value model's `score` too) is listed
// in `ignored_modules`, so loaders never look for quantized tensors that are not there.
// Refuses (Error) a spec no vLLM kernel runs unless `allow_unsupported`, and experts of one
// MoE layer quantized unlike each other (vLLM's fused MoE layer has one scheme for all).
// FP8 schemes: fp8_quantization.h; 4-bit float schemes: fp4_quantization.h.
QuantizationPlan plan_quantization(TensorMapping& mapping, const QuantizeSpec& spec);

// config.json's `quantization_config` block (any scheme).
nlohmann::ordered_json quantization_config(const QuantizeSpec& spec, const std::vector<std::string>& ignored_modules);

// Quantization error of one block, for the summary (by tensor kind: "self_attn.q_proj", ...).
struct QuantError {
    double sum = 0;
    double max = 0;
    uint64_t count = 0;
};
std::string quantized_kind(const std::string& tensor_name);
// The weight a quantized output tensor stands for, as the user knows it: `<m>.weight` for the int
// and 4-bit float schemes' `<m>.weight_packed` and for FP8's `<m>.weight` (messages name it).
std::string quantized_weight_name(const std::string& output_name);

// The kernels: exec/int_quantize.h (int4/int8), exec/fp8_quantize.h (FP8), exec/fp4_quantize.h
// (NVFP4, MXFP4).

}  // namespace vmerge
