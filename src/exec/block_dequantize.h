#pragma once
#include <cstdint>

namespace vmerge {

// Block FP8 to float32, as transformers' Fp8Dequantize (integrations/finegrained_fp8.py) and
// DeepSeek-V3's weight_dequant compute it on the CPU: each e4m3fn code converted exactly to
// float32 and multiplied, in float32 (one rounding), by the scale of its block. The caller
// rounds the result to the output dtype once, as `.to(dtype)` does.
//
// `codes` holds rows [row_begin, row_end) of a weight `cols` wide; `scales` is the weight's
// whole scale grid, row-major, `scale_cols` = ceil(cols / block_cols) wide, so the last block
// of a row or column may be partial. A NaN code (0x7F, 0xFF) stays NaN, as in torch.
void dequantize_block_fp8(const uint8_t* codes, int64_t row_begin, int64_t row_end, int64_t cols,
                          const float* scales, int64_t scale_cols, int64_t block_rows, int64_t block_cols,
                          float* out);

}  // namespace vmerge
