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

// The rounded magnitude and the code of each scaled value of a group, its codes packed (column 2j
// in the low nibble), and |dequantized - w| added to the totals. The magnitude comes from the same
// comparisons as e2m1_code (their steps: 0.5 four times, 1 twice, 2), so the loops vectorise; the
// error maximum is taken on the bit patterns, which order as these non-negative values do.
template <int64_t N>
inline void encode_group(const float* w, const float* t, float scale, uint8_t* packed, float& sum, uint32_t& max) {
    uint8_t codes[N];
    float total = 0.0f;
    uint32_t top = 0;
#pragma omp simd reduction(+ : total) reduction(max : top)
    for (int64_t c = 0; c < N; ++c) {
        const float m = std::fabs(t[c]);
        const float magnitude = 0.5f * static_cast<float>((m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f)) +
                                static_cast<float>((m > 2.5f) + (m >= 3.5f)) + 2.0f * static_cast<float>(m > 5.0f);
        codes[c] = e2m1_code(t[c]);
        const float value = t[c] < 0.0f ? -magnitude : magnitude;
        const float err = std::fabs(value * scale - w[c]);
        total += err;
        top = std::max(top, std::bit_cast<uint32_t>(err));
    }
    for (int64_t c = 0; c < N / 2; ++c) packed[c] = static_cast<uint8_t>(codes[2 * c] | (codes[2 * c + 1] << 4));
    sum += total;
    max = std::max(max, top);
}

void add_errors(QuantError& error, float sum, uint32_t max) {
    error.sum += static_cast<double>(sum);
    error.max = std::max(error.max, static_cast<double>(std::bit_cast<float>(max)));
}

// The quotient w / s rounded to D, for MXFP4 (finite values: bf16 by its bit rounding, inline).
template <DType D>
inline float round_quotient(float value) {
    if constexpr (D == DType::BF16) {
        const uint32_t bits = std::bit_cast<uint32_t>(value);
        return std::bit_cast<float>(((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16) << 16);
    } else if constexpr (D == DType::F16) {
        return f16_to_f32(f32_to_f16(value));
    } else {
        return value;
    }
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
    float t[kNvfp4Group];
    for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;  // per row, added to the double totals
        uint32_t max = 0;
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
            for (int64_t c = 0; c < kNvfp4Group; ++c) t[c] = w[c] / effective;
            encode_group<kNvfp4Group>(w, t, effective, packed + (r * cols + j * kNvfp4Group) / 2, sum, max);
        }
        add_errors(error, sum, max);
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

namespace {

// The MXFP4 shared exponent of a group whose largest |w| is `amax`, and the scale the codes are
// computed with (compressed-tensors' uint8 eps 1, exponent 127, where 2^(e - 127) is 0 in D).
struct MxScale {
    uint8_t exponent;
    float scale;
};
MxScale mx_scale(float amax, DType dtype, const std::string& tensor, int64_t row, int64_t column) {
    const float power = mx_round_to_power_2(amax, dtype);
    if (std::isinf(power))
        throw InputValueError(tensor + ": row " + std::to_string(row) + ", columns " + std::to_string(column) + ".." +
                              std::to_string(column + kMxfp4Group - 1) +
                              ": the group's largest |w| rounds to infinity as a power of two in " +
                              std::string(torch_name(dtype)) + ", so no MXFP4 scale represents it "
                              "(compressed-tensors writes no valid scale for it); leave the module out "
                              "with --quantize_ignore " + tensor.substr(0, tensor.rfind('.')));
    const int exponent = power == 0.0f ? 0 : std::clamp(127 + std::ilogb(power) - 2, 0, 255);
    const float scale = round_to(dtype, std::ldexp(1.0f, exponent - 127));
    if (scale == 0.0f) return {127, 1.0f};  // an F16 scale below 2^-24
    return {static_cast<uint8_t>(exponent), scale};
}

template <DType D>
VMERGE_VECTOR_CLONES void mxfp4_rows(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales,
                                     QuantError& error, const std::string& tensor, int64_t first_row) {
    const int64_t groups = cols / kMxfp4Group;
    float t[kMxfp4Group];
    for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;  // per row, added to the double totals
        uint32_t max = 0;
        const float* row = x + r * cols;
        check_row(row, cols, tensor, first_row + r);
        for (int64_t j = 0; j < groups; ++j) {
            const float* w = row + j * kMxfp4Group;
            const MxScale s = mx_scale(std::bit_cast<float>(max_magnitude_bits(w, kMxfp4Group)), D, tensor,
                                       first_row + r, j * kMxfp4Group);
            scales[r * groups + j] = s.exponent;
            for (int64_t c = 0; c < kMxfp4Group; ++c) t[c] = round_quotient<D>(w[c] / s.scale);
            encode_group<kMxfp4Group>(w, t, s.scale, packed + (r * cols + j * kMxfp4Group) / 2, sum, max);
        }
        add_errors(error, sum, max);
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

}  // namespace

void quantize_mxfp4_rows(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* packed, uint8_t* scales,
                         QuantError& error, const std::string& tensor, int64_t first_row) {
    switch (dtype) {
        case DType::BF16: return mxfp4_rows<DType::BF16>(x, rows, cols, packed, scales, error, tensor, first_row);
        case DType::F16: return mxfp4_rows<DType::F16>(x, rows, cols, packed, scales, error, tensor, first_row);
        default: return mxfp4_rows<DType::F32>(x, rows, cols, packed, scales, error, tensor, first_row);
    }
}

}  // namespace vmerge
