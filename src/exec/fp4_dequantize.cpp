#include "exec/fp4_dequantize.h"

#include <cmath>
#include <limits>

#include "exec/float4_e2m1.h"
#include "exec/float8_e4m3.h"

namespace vmerge {

void fp4_effective_scales(const uint8_t* scales, bool nvfp4, float global, float* out, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        const uint8_t b = scales[i];
        if (nvfp4)
            out[i] = (b & 0x7F) == 0x7F ? std::numeric_limits<float>::quiet_NaN() : e4m3fn_finite_to_float(b) / global;
        else
            out[i] = b == 0xFF ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, static_cast<int>(b) - 127);
    }
}

void dequantize_fp4_rows(const uint8_t* packed, int64_t rows, int64_t cols, const float* scales, int64_t group,
                         float* out) {
    const int64_t groups = cols / group;
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* in = packed + r * (cols / 2);
        float* o = out + r * cols;
        const float* s = scales + r * groups;
        for (int64_t c = 0; c < cols; c += 2) {
            const uint8_t pair = in[c / 2];
            o[c] = e2m1_value(pair & 0x0F) * s[c / group];
            o[c + 1] = e2m1_value(pair >> 4) * s[(c + 1) / group];
        }
    }
}

}  // namespace vmerge
