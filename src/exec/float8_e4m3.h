#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace vmerge {

// first or second by a mask rather than a branch: GCC if-converts a ternary on integers only
// sometimes, and a branch in the loop body stops it vectorising the whole loop.
inline uint32_t select_bits(bool take_first, uint32_t first, uint32_t second) {
    const uint32_t mask = 0u - static_cast<uint32_t>(take_first);
    return (first & mask) | (second & ~mask);
}

// float8_e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinity; 0x7F/0xFF are
// NaN; largest finite 448 = 0x7E), converted exactly as torch's c10 routine does
// (docs/reference/fp8-formats.md §1): round to nearest, ties to the even mantissa, in the normal
// and the subnormal range alike, and NOT saturating: |v| >= 480, ±Inf and NaN give the NaN code,
// and so do values in (464, 480), which round up onto it. The sign bit is always copied.
// Inline: the quantizers call it once per weight.
inline uint8_t e4m3fn_from_float(float value) {
    constexpr uint32_t first_unrepresentable = 0x43F00000u;  // 480.0f: rounds onto the NaN code
    constexpr uint32_t smallest_normal = 0x3C800000u;        // 2^-6
    // Adding 2^14 in binary32 leaves a spacing of 2^-9 (the e4m3 subnormal step) in the low
    // mantissa bits, so the hardware addition does the nearest-even rounding of a subnormal.
    constexpr uint32_t subnormal_magic = 0x46800000u;        // 2^14
    uint32_t bits = std::bit_cast<uint32_t>(value);
    const uint32_t sign = bits & 0x80000000u;
    bits ^= sign;
    uint8_t code;
    if (bits >= first_unrepresentable) {  // also ±Inf and every NaN
        code = 0x7F;
    } else if (bits < smallest_normal) {
        const float sum = std::bit_cast<float>(bits) + std::bit_cast<float>(subnormal_magic);
        code = static_cast<uint8_t>(std::bit_cast<uint32_t>(sum) - subnormal_magic);
    } else {
        // Rebias the exponent (127 -> 7) and round the 20 dropped mantissa bits to nearest even.
        const uint32_t odd = (bits >> 20) & 1u;
        bits += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu + odd;
        code = static_cast<uint8_t>(bits >> 20);
    }
    return static_cast<uint8_t>(code | (sign >> 24));
}

// What every quantizer writes: the value clamped to [-448, 448] first, so that no finite value
// ever becomes the NaN code (values above 448 that round to 448 anyway give the same byte).
// NaN stays NaN (callers refuse non-finite weights before they get here).
inline uint8_t e4m3fn_from_float_clamped(float value) {
    if (std::isnan(value)) return e4m3fn_from_float(value);
    return e4m3fn_from_float(std::fmax(-448.0f, std::fmin(448.0f, value)));
}

// e4m3fn_from_float_clamped for a finite value, without branches (so that the quantizers'
// loops vectorise): the magnitude's bits are clamped to those of 448 (bits of positive floats
// order as their values), and both the normal and the subnormal rounding are computed and one
// is selected. Equal to e4m3fn_from_float_clamped for every finite input (unit-tested).
inline uint8_t e4m3fn_from_finite_clamped(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    const uint32_t sign = bits & 0x80000000u;
    const uint32_t magnitude = std::min(bits ^ sign, 0x43E00000u);  // 448.0f
    const uint32_t normal =
        (magnitude + (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFFu + ((magnitude >> 20) & 1u)) >> 20;
    const uint32_t subnormal =
        std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + std::bit_cast<float>(0x46800000u)) - 0x46800000u;
    const uint32_t code = select_bits(magnitude < 0x3C800000u, subnormal, normal);
    return static_cast<uint8_t>((code & 0x7Fu) | (sign >> 24));
}

// The value of a code other than the NaN ones, without branches (the sign is the code's top bit
// moved to the float's).
inline float e4m3fn_finite_to_float(uint8_t code) {
    const int32_t magnitude = code & 0x7F;
    const uint32_t normal = static_cast<uint32_t>(magnitude + (120 << 3)) << 20;
    const uint32_t subnormal = std::bit_cast<uint32_t>(static_cast<float>(magnitude) * 0.001953125f);  // m * 2^-9
    const uint32_t value = select_bits(magnitude < 8, subnormal, normal);
    return std::bit_cast<float>(value | (static_cast<uint32_t>(code & 0x80) << 24));
}

float e4m3fn_to_float(uint8_t code);

}  // namespace vmerge
