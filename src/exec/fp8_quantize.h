#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "mapping/quantization.h"

namespace vmerge {

// The two FP8 weight layouts of docs/reference/fp8-formats.md, on rows of one weight [rows, cols]
// given as binary32 values (exactly the weight as the unquantized merge writes it). Both refuse a
// NaN or infinite weight as every quantizer does (finite_weights.h: an Error naming `tensor`, the
// row counted from `first_row`, the column and the value), and store scales by
// quantization_scale.h.

// Block FP8 (§2.2): `x` holds whole 128-row stripes (the last may be shorter), so every
// 128x128 block (partial ones at the right and bottom edges) is complete. Per block, in
// binary32: a = max(max|w|, 1e-4f); s = a / 448, with Fp8ScaleFormat::Ue8m0 rounded up to the
// least power of two >= s (DeepGEMM's ceil_to_ue8m0 on the binary32 bits: exponent field + 1 when
// any mantissa bit is set; lowbit-formats.md §5), stored in `scale_inv` (ceil(rows/128) x
// ceil(cols/128), row-major); r = 1 / s; code = e4m3fn(clamp(w * r)).
void quantize_fp8_blocks(const float* x, int64_t rows, int64_t cols, Fp8ScaleFormat format, uint8_t* codes,
                         float* scale_inv, QuantError& error, const std::string& tensor, int64_t first_row);

// DeepGEMM's ceil_to_ue8m0 of a positive finite binary32: the least power of two >= s, its
// exponent field kept within [1, 254] (never UE8M0's NaN 0xFF nor a zero scale).
float ceil_to_ue8m0(float s);

// compressed-tensors FP8_BLOCK weights (lowbit-formats.md §4): the FP8_DYNAMIC arithmetic below
// with a 128x128 block's amax instead of a row's (compressed-tensors pads partial blocks with
// zeros, which change no amax): s = round_D(a / 448), eps(D) where that is zero; code =
// e4m3fn(clamp(round_D(w / s) + 0, -448, 448)). `x` holds whole 128-row stripes as for
// quantize_fp8_blocks; the scales are stored in D (`scales`, ceil(rows/128) x ceil(cols/128)).
void quantize_fp8_ct_blocks(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* codes,
                            unsigned char* scales, QuantError& error, const std::string& tensor, int64_t first_row);

// compressed-tensors FP8_DYNAMIC weights (§3.2), per row, every step rounded to the weight
// dtype D (BF16, F16 or F32) as torch does on D tensors: s = round_D(a / 448) with a = max|w|,
// an all-zero row gets eps(D); t = round_D(w / s) + 0 (compressed-tensors adds its zero point, 0:
// a quotient of -0 becomes +0); code = e4m3fn(clamp(t, -448, 448)). The
// scales are stored in D (`scales`, rows x 1).
void quantize_fp8_channels(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* codes,
                           unsigned char* scales, QuantError& error, const std::string& tensor, int64_t first_row);

}  // namespace vmerge
