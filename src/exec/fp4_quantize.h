#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "mapping/quantization.h"

namespace vmerge {

// The two 4-bit float layouts of docs/reference/lowbit-formats.md (§2.2 MXFP4, §3 NVFP4), as
// compressed-tensors' CPU quantizer computes them, on rows of one weight [rows, cols] given as
// binary32 values that are exactly the weight in its dtype D (BF16, F16 or F32): the weight as the
// unquantized merge writes it. cols is a multiple of the group (16 or 32). Codes are packed two
// per byte along the row, column 2j in the low nibble. A NaN or infinite weight is refused as
// every quantizer refuses it (finite_weights.h: an Error naming `tensor`, the row counted from
// `first_row`, the column and the value).

// NVFP4's global scale for a weight (or fused group) whose largest |w| is `amax` (exact in D):
// compressed-tensors' generate_gparam, 448·6 / amax evaluated as torch evaluates a Python number
// over a D tensor: amax clamped to D's smallest normal, r = round_D(1 / amax), g = round_D(r · 2688),
// and g = 1 where that overflows D (its nan_to_num; e.g. an F16 amax below about 0.041).
float nvfp4_global_scale(float amax, DType dtype);

// NVFP4 (compressed-tensors `nvfp4-pack-quantized`, strategy tensor_group), per group of 16:
// a = max|w|; s1 = round_D(a / 6); s = e4m3(clamp(binary32(g · s1), ±448)), and 0.125 where s is
// 0 (compressed-tensors' FP8 eps), stored in `scales` (rows x cols/16 E4M3 bytes);
// e = binary32(s / g); code = e2m1(binary32(w / e)).
void quantize_nvfp4_rows(const float* x, int64_t rows, int64_t cols, DType dtype, float global_scale,
                         uint8_t* packed, uint8_t* scales, QuantError& error, const std::string& tensor,
                         int64_t first_row);

// MXFP4 (compressed-tensors `mxfp4-pack-quantized`), per group of 32: a = max|w|; p = a rounded to a
// power of two on D's bits (round_to_power_2: down, unless the mantissa fraction is >= 0.75);
// e = clamp(127 + log2 p - 2, 0, 255) (0 for p = 0); s = round_D(2^(e - 127)), and s = 1 (e = 127)
// where that is 0 in D (compressed-tensors' eps for a uint8 scale; only F16 underflows);
// code = e2m1(round_D(w / s)). `scales` (rows x cols/32) get the UE8M0 byte e. A group whose p
// is infinite (|w| within a quarter step of D's largest power of two) has no UE8M0 scale that
// compressed-tensors decodes back: it is refused, naming the tensor, row and columns.
void quantize_mxfp4_rows(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* packed, uint8_t* scales,
                         QuantError& error, const std::string& tensor, int64_t first_row);

// compressed-tensors' round_to_power_2 of a non-negative value exact in D, as a float.
float mx_round_to_power_2(float value, DType dtype);

}  // namespace vmerge
