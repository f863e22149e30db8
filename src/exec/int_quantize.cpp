#include "exec/int_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "exec/finite_weights.h"
#include "exec/quantization_scale.h"

namespace vmerge {

void quantize_rows(const float* x, int64_t rows, int64_t cols, const QuantizeSpec& spec, DType scale_dtype,
                   uint32_t* packed, unsigned char* scales, int32_t* zero_points, QuantError& error,
                   const std::string& tensor, int64_t first_row) {
    // Before any arithmetic: a NaN passes min/max unseen and an infinity makes an infinite scale.
    require_finite(x, rows, cols, cols, {tensor, first_row, WeightUse::Quantize});
    const int bits = spec.bits;
    const int64_t group = spec.group_size ? spec.group_size : cols;
    const int64_t groups = cols / group;
    const int64_t per_word = 32 / bits;
    const int64_t words = (cols + per_word - 1) / per_word;
    const float qmin = -static_cast<float>(1 << (bits - 1)), qmax = static_cast<float>((1 << (bits - 1)) - 1);
    const size_t scale_size = element_size(scale_dtype);
    std::memset(packed, 0, static_cast<size_t>(rows * words) * 4);
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        for (int64_t g = 0; g < groups; ++g) {
            const float* v = row + g * group;
            float mn = 0.0f, mx = 0.0f;
            for (int64_t k = 0; k < group; ++k) {
                mn = std::min(mn, v[k]);
                mx = std::max(mx, v[k]);
            }
            float scale = spec.symmetric ? std::max(std::fabs(mn), std::fabs(mx)) / ((qmax - qmin) / 2.0f)
                                         : (mx - mn) / (qmax - qmin);
            float zero = 0.0f;
            // The zero point comes from the fp32 scale (an all-zero group's from eps: qmin, not
            // 0/0); values are then quantized with the scale as stored, so dequantizing the file
            // gives exactly these integers' values.
            if (!spec.symmetric)
                zero = std::nearbyint(std::clamp(qmin - mn / (scale == 0.0f ? scale_eps(scale_dtype) : scale), qmin, qmax));
            scale = store_scale(scale, scale_dtype, scales + static_cast<size_t>(r * groups + g) * scale_size);
            zero_points[r * groups + g] = static_cast<int32_t>(zero);
            for (int64_t k = 0; k < group; ++k) {
                const float q = std::clamp(std::nearbyint(v[k] / scale + zero), qmin, qmax);
                const double err = std::fabs(static_cast<double>((q - zero) * scale) - static_cast<double>(v[k]));
                error.sum += err;
                error.max = std::max(error.max, err);
                const int64_t c = g * group + k;
                const uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(q) + (1 << (bits - 1)));
                packed[r * words + c / per_word] |= u << (bits * (c % per_word));
            }
            error.count += static_cast<uint64_t>(group);
        }
    }
}

void pack_zero_points(const int32_t* zero_points, int64_t rows, int64_t groups, int bits, uint32_t* out) {
    const int64_t per_word = 32 / bits;
    const int64_t packed_rows = (rows + per_word - 1) / per_word;
    std::memset(out, 0, static_cast<size_t>(packed_rows * groups) * 4);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t g = 0; g < groups; ++g) {
            const uint32_t u = static_cast<uint32_t>(zero_points[r * groups + g] + (1 << (bits - 1)));
            out[(r / per_word) * groups + g] |= u << (bits * (r % per_word));
        }
}

}  // namespace vmerge
