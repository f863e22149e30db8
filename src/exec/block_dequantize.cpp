#include "exec/block_dequantize.h"

#include <array>

#include "exec/float8_e4m3.h"

namespace vmerge {
namespace {

// Every code's float32 value: a table lookup per weight instead of the bit arithmetic.
const std::array<float, 256>& e4m3fn_values() {
    static const std::array<float, 256> values = [] {
        std::array<float, 256> v{};
        for (int code = 0; code < 256; ++code) v[code] = e4m3fn_to_float(static_cast<uint8_t>(code));
        return v;
    }();
    return values;
}

}  // namespace

void dequantize_block_fp8(const uint8_t* codes, int64_t row_begin, int64_t row_end, int64_t cols,
                          const float* scales, int64_t scale_cols, int64_t block_rows, int64_t block_cols,
                          float* out) {
    const std::array<float, 256>& value = e4m3fn_values();
    for (int64_t r = row_begin; r < row_end; ++r) {
        const float* scale_row = scales + (r / block_rows) * scale_cols;
        const uint8_t* in = codes + (r - row_begin) * cols;
        float* o = out + (r - row_begin) * cols;
        for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
            const float s = scale_row[c0 / block_cols];
            const int64_t c1 = c0 + block_cols < cols ? c0 + block_cols : cols;
            for (int64_t c = c0; c < c1; ++c) o[c] = value[in[c]] * s;
        }
    }
}

}  // namespace vmerge
