#include "exec/block_dequantize.h"

#include <algorithm>
#include <bit>

#include "core/vector_clones.h"
#include "exec/float8_e4m3.h"

namespace vmerge {
namespace {

// A code's float32 value without branches or a table (so the loop below vectorises): the finite
// codes as e4m3fn_finite_to_float gives them, the two NaN codes as a quiet NaN.
inline float e4m3fn_value(uint8_t code) {
    const uint32_t finite = std::bit_cast<uint32_t>(e4m3fn_finite_to_float(code));
    return std::bit_cast<float>(select_bits((code & 0x7F) == 0x7F, 0x7FC00000u, finite));
}

// out[i] = value(codes[i]) · scale, one float32 multiplication each.
VMERGE_VECTOR_CLONES void scale_codes(const uint8_t* codes, float scale, float* out, int64_t count) {
    for (int64_t i = 0; i < count; ++i) out[i] = e4m3fn_value(codes[i]) * scale;
}

}  // namespace

void dequantize_block_fp8(const uint8_t* codes, int64_t row_begin, int64_t row_end, int64_t cols,
                          const float* scales, int64_t scale_cols, int64_t block_rows, int64_t block_cols,
                          float* out) {
    for (int64_t r = row_begin; r < row_end; ++r) {
        const float* scale_row = scales + (r / block_rows) * scale_cols;
        const uint8_t* in = codes + (r - row_begin) * cols;
        float* o = out + (r - row_begin) * cols;
        for (int64_t c = 0; c < cols; c += block_cols)
            scale_codes(in + c, scale_row[c / block_cols], o + c, std::min(block_cols, cols - c));
    }
}

}  // namespace vmerge
