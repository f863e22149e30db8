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

// compressed-tensors' round_to_power_2 on D's bits: add a quarter of the mantissa's range and keep
// sign and exponent (E2M1 has one mantissa bit). Inline: MXFP4 takes one per group of 32.
template <DType D>
inline float round_to_power_2(float value) {
    if constexpr (D == DType::BF16) {
        const uint16_t bits = f32_to_bf16(value);
        return bf16_to_f32(static_cast<uint16_t>((bits + (1u << 5)) & 0xFF80u));
    } else if constexpr (D == DType::F16) {
        const uint16_t bits = f32_to_f16(value);
        return f16_to_f32(static_cast<uint16_t>((bits + (1u << 8)) & 0xFC00u));
    } else {
        return std::bit_cast<float>((std::bit_cast<uint32_t>(value) + (1u << 21)) & 0xFF800000u);
    }
}

// Columns encoded per pass: the group scales of a chunk are spread over its columns first, so the
// encoding is one long branch-free loop (8 float lanes under AVX2) instead of a loop per group
// of 16 or 32 with its own reduction. A multiple of both groups; 2 KiB of scales, in L1.
constexpr int64_t kChunk = 512;

// The scale each column of a chunk is encoded with, group by group.
template <int64_t G>
[[gnu::always_inline]] inline void spread_scales(const float* group_scales, int64_t n, float* scale) {
    for (int64_t j = 0; j < n / G; ++j)
        for (int64_t c = 0; c < G; ++c) scale[j * G + c] = group_scales[j];
}

// The codes of n values w with their scales (t = w / scale, rounded to D first when `RoundToD`:
// MXFP4), packed two per byte (column 2j in the low nibble), and |dequantized - w| added to the
// row's sum and maximum. The rounded magnitude comes from the same comparisons as e2m1_code
// (their steps: 0.5 four times, 1 twice, 2). `omp simd` lets the error sum use vector lanes, which
// only moves the statistic's last bits; the maximum is taken on the bit patterns, which order as
// these non-negative values do.
template <DType D, bool RoundToD>
[[gnu::always_inline]] inline void encode_chunk(const float* w, const float* scale, int64_t n, uint8_t* packed, float& sum, uint32_t& max) {
    uint8_t codes[kChunk];
    float total = 0.0f;
    uint32_t top = 0;
#pragma omp simd reduction(+ : total) reduction(max : top)
    for (int64_t c = 0; c < n; ++c) {
        float t = w[c] / scale[c];
        if constexpr (RoundToD) t = round_quotient<D>(t);
        const float m = std::fabs(t);
        const float magnitude = 0.5f * static_cast<float>((m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f)) +
                                static_cast<float>((m > 2.5f) + (m >= 3.5f)) + 2.0f * static_cast<float>(m > 5.0f);
        codes[c] = e2m1_code(t);
        const float value = t < 0.0f ? -magnitude : magnitude;
        const float err = std::fabs(value * scale[c] - w[c]);
        total += err;
        top = std::max(top, std::bit_cast<uint32_t>(err));
    }
    for (int64_t c = 0; c < n / 2; ++c) packed[c] = static_cast<uint8_t>(codes[2 * c] | (codes[2 * c + 1] << 4));
    sum += total;
    max = std::max(max, top);
}

void add_errors(QuantError& error, float sum, uint32_t max) {
    error.sum += static_cast<double>(sum);
    error.max = std::max(error.max, static_cast<double>(std::bit_cast<float>(max)));
}

}  // namespace

float nvfp4_global_scale(float amax, DType dtype) {
    const float tiny = dtype == DType::F16 ? 6.103515625e-05f : std::numeric_limits<float>::min();
    const float reciprocal = round_to(dtype, 1.0f / std::max(amax, tiny));
    const float g = round_to(dtype, reciprocal * (448.0f * kE2m1Max));
    return std::isfinite(g) ? g : 1.0f;
}

float mx_round_to_power_2(float value, DType dtype) {
    switch (dtype) {
        case DType::BF16: return round_to_power_2<DType::BF16>(value);
        case DType::F16: return round_to_power_2<DType::F16>(value);
        default: return round_to_power_2<DType::F32>(value);
    }
}

namespace {

// One row of NVFP4 in the weight dtype D, a chunk at a time: the group scales (scalar, one per 16
// values), then the codes of the chunk's columns.
template <DType D>
[[gnu::always_inline]] inline void nvfp4_row(const float* row, int64_t cols, float global_scale, uint8_t* packed, uint8_t* scales,
                      float& sum, uint32_t& max) {
    float effective[kChunk / kNvfp4Group], scale[kChunk];
    for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
        const int64_t n = std::min(kChunk, cols - c0);
        for (int64_t j = 0; j < n / kNvfp4Group; ++j) {
            const float amax = std::bit_cast<float>(max_magnitude_bits(row + c0 + j * kNvfp4Group, kNvfp4Group));
            const float local = round_quotient<D>(amax / kE2m1Max);
            uint8_t scale_code = e4m3fn_from_float_clamped(global_scale * local);
            // g and s1 are finite, so the clamped code is never a NaN code: the branch-free
            // decoder gives e4m3fn_to_float's value.
            if (e4m3fn_finite_to_float(scale_code) == 0.0f) scale_code = kE4m3Eighth;
            scales[c0 / kNvfp4Group + j] = scale_code;
            effective[j] = e4m3fn_finite_to_float(scale_code) / global_scale;
        }
        spread_scales<kNvfp4Group>(effective, n, scale);
        encode_chunk<D, false>(row + c0, scale, n, packed + c0 / 2, sum, max);
    }
}

template <DType D>
VMERGE_VECTOR_CLONES void nvfp4_rows(const float* x, int64_t rows, int64_t cols, float global_scale, uint8_t* packed,
                                     uint8_t* scales, QuantError& error, const std::string& tensor,
                                     int64_t first_row) {
    const int64_t groups = cols / kNvfp4Group;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        check_row(row, cols, tensor, first_row + r);
        float sum = 0.0f;  // per row, added to the double totals
        uint32_t max = 0;
        nvfp4_row<D>(row, cols, global_scale, packed + r * cols / 2, scales + r * groups, sum, max);
        add_errors(error, sum, max);
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

}  // namespace

void quantize_nvfp4_rows(const float* x, int64_t rows, int64_t cols, DType dtype, float global_scale, uint8_t* packed,
                         uint8_t* scales, QuantError& error, const std::string& tensor, int64_t first_row) {
    switch (dtype) {
        case DType::BF16:
            return nvfp4_rows<DType::BF16>(x, rows, cols, global_scale, packed, scales, error, tensor, first_row);
        case DType::F16:
            return nvfp4_rows<DType::F16>(x, rows, cols, global_scale, packed, scales, error, tensor, first_row);
        default: return nvfp4_rows<DType::F32>(x, rows, cols, global_scale, packed, scales, error, tensor, first_row);
    }
}

namespace {

// The MXFP4 shared exponent of a group whose largest |w| is `amax`, and the scale the codes are
// computed with (compressed-tensors' uint8 eps 1, exponent 127, where 2^(e - 127) is 0 in D).
struct MxScale {
    uint8_t exponent;
    float scale;
};
[[noreturn, gnu::cold, gnu::noinline]] void refuse_infinite_power(DType dtype, const std::string& tensor, int64_t row,
                                                                  int64_t column) {
    throw InputValueError(tensor + ": row " + std::to_string(row) + ", columns " + std::to_string(column) + ".." +
                          std::to_string(column + kMxfp4Group - 1) +
                          ": the group's largest |w| rounds to infinity as a power of two in " +
                          std::string(torch_name(dtype)) + ", so no MXFP4 scale represents it "
                          "(compressed-tensors writes no valid scale for it); leave the module out "
                          "with --quantize_ignore " + tensor.substr(0, tensor.rfind('.')));
}

// The power of two is read off its bits: round_to_power_2 clears the mantissa of a D value, so
// `power` is 0, infinity, or a normal binary32 power of two 2^(E - 127) with E its exponent field
// (a D subnormal gives 0 or D's smallest normal), and 127 + log2(power) - 2 is E - 2. The scale
// 2^(e - 127) is the binary32 with exponent field e, or 2^-127 (the subnormal 0x00400000) for e = 0.
template <DType D>
[[gnu::always_inline]] inline MxScale mx_scale(float amax, const std::string& tensor, int64_t row, int64_t column) {
    const uint32_t power = std::bit_cast<uint32_t>(round_to_power_2<D>(amax));
    if (power >= kNonFiniteMagnitude) refuse_infinite_power(D, tensor, row, column);
    const uint32_t field = power >> 23;
    const int exponent = field == 0 ? 0 : std::max(static_cast<int>(field) - 2, 0);
    const float scale = round_quotient<D>(std::bit_cast<float>(exponent == 0 ? 0x00400000u : uint32_t(exponent) << 23));
    if (scale == 0.0f) return {127, 1.0f};  // an F16 scale below 2^-24
    return {static_cast<uint8_t>(exponent), scale};
}

template <DType D>
VMERGE_VECTOR_CLONES void mxfp4_rows(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales,
                                     QuantError& error, const std::string& tensor, int64_t first_row) {
    const int64_t groups = cols / kMxfp4Group;
    float group_scale[kChunk / kMxfp4Group], scale[kChunk];
    for (int64_t r = 0; r < rows; ++r) {
        float sum = 0.0f;  // per row, added to the double totals
        uint32_t max = 0;
        const float* row = x + r * cols;
        check_row(row, cols, tensor, first_row + r);
        for (int64_t c0 = 0; c0 < cols; c0 += kChunk) {
            const int64_t n = std::min(kChunk, cols - c0);
            for (int64_t j = 0; j < n / kMxfp4Group; ++j) {
                const int64_t column = c0 + j * kMxfp4Group;
                const MxScale s = mx_scale<D>(std::bit_cast<float>(max_magnitude_bits(row + column, kMxfp4Group)),
                                              tensor, first_row + r, column);
                scales[r * groups + column / kMxfp4Group] = s.exponent;
                group_scale[j] = s.scale;
            }
            spread_scales<kMxfp4Group>(group_scale, n, scale);
            encode_chunk<D, true>(row + c0, scale, n, packed + (r * cols + c0) / 2, sum, max);
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
