#include "exec/fp8_quantize.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "exec/dtype_cast.h"
#include "exec/float8_e4m3.h"

namespace vmerge {
namespace {

constexpr int64_t kBlock = 128;
constexpr float kE4m3Max = 448.0f;

[[noreturn]] void refuse_non_finite(const std::string& tensor, int64_t row) {
    throw Error(tensor + ": row " + std::to_string(row) + " holds a NaN or infinite value; an FP8 scale cannot be "
                "computed for it (merge without --quantize to keep the weights as they are)");
}

// The value rounded to the weight dtype, as a D tensor's arithmetic result is (values are
// finite here: round to nearest even, inline since it runs twice per weight).
inline float round_to(DType dtype, float value) {
    if (dtype == DType::BF16) {
        const uint32_t bits = std::bit_cast<uint32_t>(value);
        return std::bit_cast<float>(((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16) << 16);
    }
    if (dtype == DType::F16) return f16_to_f32(f32_to_f16(value));
    return value;
}

// compressed-tensors replaces a zero scale by the scale dtype's machine epsilon.
float eps_of(DType dtype) {
    switch (dtype) {
        case DType::BF16: return 0.0078125f;      // 2^-7
        case DType::F16: return 0.0009765625f;    // 2^-10
        default: return 1.1920928955078125e-07f;  // 2^-23
    }
}

// The value of every code, local to a kernel call (no call per weight).
using DecodeTable = std::array<float, 256>;
DecodeTable decode_table() {
    DecodeTable t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3fn_to_float(static_cast<uint8_t>(c));
    return t;
}

// |dequantized - w| of one element, summed per row or block in float and added in double.
inline float dequant_error(const DecodeTable& values, uint8_t code, float scale, float value) {
    return std::fabs(values[code] * scale - value);
}

void add_errors(QuantError& error, float sum, float max) {
    error.sum += static_cast<double>(sum);
    error.max = std::max(error.max, static_cast<double>(max));
}

}  // namespace

void quantize_fp8_blocks(const float* x, int64_t rows, int64_t cols, uint8_t* codes, float* scale_inv,
                         QuantError& error, const std::string& tensor, int64_t first_row) {
    const int64_t block_cols = (cols + kBlock - 1) / kBlock;
    const DecodeTable values = decode_table();
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        const int64_t r1 = std::min(rows, r0 + kBlock);
        for (int64_t j = 0; j < block_cols; ++j) {
            const int64_t c0 = j * kBlock, c1 = std::min(cols, c0 + kBlock);
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; ++r) {
                const float* row = x + r * cols;
                for (int64_t c = c0; c < c1; ++c) {
                    if (!std::isfinite(row[c])) refuse_non_finite(tensor, first_row + r);
                    amax = std::max(amax, std::fabs(row[c]));
                }
            }
            // DeepGEMM's floor (the binary32 nearest 1e-4) keeps an all-zero block's scale finite.
            amax = std::max(amax, 1e-4f);
            const float scale = amax / kE4m3Max;
            const float inverse = 1.0f / scale;
            scale_inv[(r0 / kBlock) * block_cols + j] = scale;
            float sum = 0.0f, max = 0.0f;
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) {
                    const float w = x[r * cols + c];
                    const uint8_t code = e4m3fn_from_float_clamped(w * inverse);
                    codes[r * cols + c] = code;
                    const float err = dequant_error(values, code, scale, w);
                    sum += err;
                    max = std::max(max, err);
                }
            add_errors(error, sum, max);
        }
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

void quantize_fp8_channels(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* codes,
                           unsigned char* scales, QuantError& error, const std::string& tensor, int64_t first_row) {
    const size_t scale_size = element_size(dtype);
    const DecodeTable values = decode_table();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float amax = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            if (!std::isfinite(row[c])) refuse_non_finite(tensor, first_row + r);
            amax = std::max(amax, std::fabs(row[c]));
        }
        float scale = round_to(dtype, amax / kE4m3Max);
        if (scale == 0.0f) scale = eps_of(dtype);
        cast_elements(&scale, DType::F32, scales + static_cast<size_t>(r) * scale_size, dtype, 1);
        float sum = 0.0f, max = 0.0f;
        for (int64_t c = 0; c < cols; ++c) {
            const float t = round_to(dtype, row[c] / scale);
            const uint8_t code = e4m3fn_from_float_clamped(t);
            codes[r * cols + c] = code;
            const float err = dequant_error(values, code, scale, row[c]);
            sum += err;
            max = std::max(max, err);
        }
        add_errors(error, sum, max);
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

}  // namespace vmerge
