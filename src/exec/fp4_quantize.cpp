#include "exec/fp4_quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/vector_clones.h"
#include "exec/finite_weights.h"
#include "exec/float4_e2m1.h"
#include "exec/float8_e4m3.h"

namespace vmerge {
namespace {

constexpr float kE2m1Max = 6.0f;
constexpr uint8_t kE4m3Eighth = 0x20;  // 0.125, compressed-tensors' eps of an FP8 scale

// The value rounded to D as the result of a D tensor's arithmetic is (torch computes in binary32
// and rounds to nearest even); F16 overflows to infinity.
inline float round_to(DType dtype, float value) {
    if (dtype == DType::BF16) return bf16_to_f32(f32_to_bf16(value));
    if (dtype == DType::F16) return f16_to_f32(f32_to_f16(value));
    return value;
}

// Refuses the first non-finite value of a row (its max magnitude bits say there is one).
inline void check_row(const float* row, int64_t cols, const std::string& tensor, int64_t row_index) {
    if (max_magnitude_bits(row, cols) >= kNonFiniteMagnitude)
        require_finite(row, 1, cols, cols, {tensor, row_index, WeightUse::Quantize});
}

// Packs one group's codes (even column low nibble) and adds its |dequantized - w| to the totals.
inline void pack_group(const float* w, const uint8_t* codes, int64_t n, float scale, uint8_t* packed, double& sum,
                       double& max) {
    float total = 0.0f, top = 0.0f;
    for (int64_t c = 0; c < n; c += 2) {
        packed[c / 2] = static_cast<uint8_t>(codes[c] | (codes[c + 1] << 4));
        for (int64_t k = c; k < c + 2; ++k) {
            const float err = std::fabs(e2m1_value(codes[k]) * scale - w[k]);
            total += err;
            top = std::max(top, err);
        }
    }
    sum += total;
    max = std::max(max, static_cast<double>(top));
}

}  // namespace

float nvfp4_global_scale(float amax, DType dtype) {
    const float tiny = dtype == DType::F16 ? 6.103515625e-05f : std::numeric_limits<float>::min();
    const float reciprocal = round_to(dtype, 1.0f / std::max(amax, tiny));
    const float g = round_to(dtype, reciprocal * (448.0f * kE2m1Max));
    return std::isfinite(g) ? g : 1.0f;
}

float mx_round_to_power_2(float value, DType dtype) {
    // Add a quarter of the mantissa's range and keep sign and exponent (E2M1 has one mantissa bit).
    if (dtype == DType::BF16) {
        const uint16_t bits = f32_to_bf16(value);
        return bf16_to_f32(static_cast<uint16_t>((bits + (1u << 5)) & 0xFF80u));
    }
    if (dtype == DType::F16) {
        const uint16_t bits = f32_to_f16(value);
        return f16_to_f32(static_cast<uint16_t>((bits + (1u << 8)) & 0xFC00u));
    }
    return std::bit_cast<float>((std::bit_cast<uint32_t>(value) + (1u << 21)) & 0xFF800000u);
}

VMERGE_VECTOR_CLONES void quantize_nvfp4_rows(const float* x, int64_t rows, int64_t cols, DType dtype,
                                              float global_scale, uint8_t* packed, uint8_t* scales, QuantError& error,
                                              const std::string& tensor, int64_t first_row) {
    const int64_t groups = cols / kNvfp4Group;
    uint8_t codes[kNvfp4Group];
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        check_row(row, cols, tensor, first_row + r);
        for (int64_t j = 0; j < groups; ++j) {
            const float* w = row + j * kNvfp4Group;
            const float amax = std::bit_cast<float>(max_magnitude_bits(w, kNvfp4Group));
            const float local = round_to(dtype, amax / kE2m1Max);
            uint8_t scale_code = e4m3fn_from_float_clamped(global_scale * local);
            if (e4m3fn_to_float(scale_code) == 0.0f) scale_code = kE4m3Eighth;
            scales[r * groups + j] = scale_code;
            const float effective = e4m3fn_to_float(scale_code) / global_scale;
            for (int64_t c = 0; c < kNvfp4Group; ++c) codes[c] = e2m1_code(w[c] / effective);
            pack_group(w, codes, kNvfp4Group, effective, packed + (r * cols + j * kNvfp4Group) / 2, error.sum,
                       error.max);
        }
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

VMERGE_VECTOR_CLONES void quantize_mxfp4_rows(const float* x, int64_t rows, int64_t cols, DType dtype,
                                              uint8_t* packed, uint8_t* scales, QuantError& error,
                                              const std::string& tensor, int64_t first_row) {
    const int64_t groups = cols / kMxfp4Group;
    uint8_t codes[kMxfp4Group];
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        check_row(row, cols, tensor, first_row + r);
        for (int64_t j = 0; j < groups; ++j) {
            const float* w = row + j * kMxfp4Group;
            const float power = mx_round_to_power_2(std::bit_cast<float>(max_magnitude_bits(w, kMxfp4Group)), dtype);
            if (std::isinf(power))
                throw InputValueError(tensor + ": row " + std::to_string(first_row + r) + ", columns " +
                                      std::to_string(j * kMxfp4Group) + ".." + std::to_string((j + 1) * kMxfp4Group - 1) +
                                      ": the group's largest |w| rounds to infinity as a power of two in " +
                                      std::string(torch_name(dtype)) + ", so no MXFP4 scale represents it "
                                      "(compressed-tensors writes no valid scale for it); leave the module out "
                                      "with --quantize_ignore " + tensor.substr(0, tensor.rfind('.')));
            const int exponent = power == 0.0f ? 0 : std::clamp(127 + std::ilogb(power) - 2, 0, 255);
            float scale = round_to(dtype, std::ldexp(1.0f, exponent - 127));
            uint8_t stored = static_cast<uint8_t>(exponent);
            if (scale == 0.0f) {  // an F16 scale below 2^-24: compressed-tensors' eps of a uint8 scale, 1
                scale = 1.0f;
                stored = 127;
            }
            scales[r * groups + j] = stored;
            for (int64_t c = 0; c < kMxfp4Group; ++c) codes[c] = e2m1_code(round_to(dtype, w[c] / scale));
            pack_group(w, codes, kMxfp4Group, scale, packed + (r * cols + j * kMxfp4Group) / 2, error.sum, error.max);
        }
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

}  // namespace vmerge
