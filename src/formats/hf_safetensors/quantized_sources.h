#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// How the weights of an HF safetensors folder are quantized, as its config.json's
// `quantization_config` says (never guessed from a tensor's byte width).
struct SourceQuantization {
    std::string config_path;   // <dir>/config.json, for messages
    std::string quant_method;  // empty: no quantization_config
    // Block FP8 (quant_method "fp8", DeepSeek-V3 / Qwen3-*-FP8): the weight_block_size.
    int64_t block_rows = 0, block_cols = 0;
    // compressed-tensors FP8 weights ("float-quantized": FP8_DYNAMIC, FP8_BLOCK, FP8 per tensor):
    // their weight strategy ("channel", "tensor" or "block", with block_rows/cols); empty otherwise.
    std::string compressed_fp8_strategy;
    // compressed-tensors 4-bit float weights: "nvfp4" (nvfp4-pack-quantized, groups of 16) or
    // "mxfp4" (mxfp4-pack-quantized, groups of 32); empty otherwise.
    std::string compressed_fp4;
    int64_t fp4_group = 0;
    DType model_dtype = DType::BF16;  // config.json's dtype, what the weights dequantize to
    bool block_fp8() const { return quant_method == "fp8"; }
    bool compressed_fp8() const { return !compressed_fp8_strategy.empty(); }
    // GPT-OSS MXFP4 experts (quant_method "mxfp4": <p>_blocks U8 [E, N, K/32, 16] + <p>_scales U8).
    bool gpt_oss_mxfp4() const { return quant_method == "mxfp4"; }
};

// Reads <dir>/config.json (absent: no quantization). A quantization_config whose method or
// fields vmerge does not read is kept as text and refused only if a tensor needs it.
SourceQuantization read_source_quantization(const std::string& dir);

// Pairs every FP8 weight of `mapping` (HF tensors copied whole) with its scale (block FP8:
// `<m>.weight_scale_inv`; compressed-tensors: `<m>.weight_scale`), and every compressed-tensors
// NVFP4/MXFP4 `<m>.weight_packed` with its `<m>.weight_scale` (and NVFP4's `<m>.weight_global_scale`,
// whose value is read here), renamed `<m>.weight`, and every GPT-OSS `<p>_blocks` with its
// `<p>_scales`, renamed `<p>` [E, K, N]: the weight is dequantized into the model dtype
// as it is written
// (SourceScales) and the scale leaves the output list. Error, naming the tensor, for a
// one-byte tensor the config does not account for, a scale without its weight, a weight
// without its scale, or a scale grid of the wrong shape or dtype. Returns a note for the user
// (empty when nothing was quantized).
std::string attach_source_scales(TensorMapping& mapping, const SourceQuantization& quantization);

}  // namespace vmerge
