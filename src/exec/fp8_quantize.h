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
// binary32: a = max(max|w|, 1e-4f); s = a / 448 (stored in `scale_inv`, ceil(rows/128) x
// ceil(cols/128), row-major); r = 1 / s; code = e4m3fn(clamp(w * r)).
void quantize_fp8_blocks(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scale_inv,
                         QuantError& error, const std::string& tensor, int64_t first_row);

// compressed-tensors FP8_DYNAMIC weights (§3.2), per row, every step rounded to the weight
// dtype D (BF16, F16 or F32) as torch does on D tensors: s = round_D(a / 448) with a = max|w|,
// an all-zero row gets eps(D); t = round_D(w / s); code = e4m3fn(clamp(t, -448, 448)). The
// scales are stored in D (`scales`, rows x 1).
void quantize_fp8_channels(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* codes,
                           unsigned char* scales, QuantError& error, const std::string& tensor, int64_t first_row);

}  // namespace vmerge
