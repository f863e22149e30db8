#pragma once
#include <cstddef>
#include <cstdint>

namespace vmerge {

// NVFP4 and MXFP4 source weights to float32, as compressed-tensors' decompressor
// (NVFP4PackedCompressor / MXFP4PackedCompressor.decompress) computes them on the CPU
// (docs/quantization.md, "Quantized sources"). The caller rounds the result to bfloat16, the
// dtype that decompressor returns.

// The float32 multiplier of each group from the stored scales (`count` bytes):
// NVFP4: float32(e4m3fn scale) / global, one float32 division (the decompressor's bf16 scale
//   divided by the F32 global-scale tensor promotes to float32); a NaN code (0x7F, 0xFF) stays NaN.
// MXFP4: 2^(byte − 127) (UE8M0), exact in float32 for every byte below 255; 255 is E8M0's NaN.
void fp4_effective_scales(const uint8_t* scales, bool nvfp4, float global, float* out, size_t count);

// `rows` rows of packed codes (cols / 2 bytes each, the low nibble the even column) times the
// multipliers of their groups (`scales`: rows × cols / group, row-major): one float32
// multiplication per value, the code's value exact. A -0 code gives -0.
void dequantize_fp4_rows(const uint8_t* packed, int64_t rows, int64_t cols, const float* scales, int64_t group,
                         float* out);

}  // namespace vmerge
