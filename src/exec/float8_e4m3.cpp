#include "exec/float8_e4m3.h"

#include <bit>
#include <cmath>
#include <limits>

namespace vmerge {

uint8_t e4m3fn_from_float(float value) {
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

uint8_t e4m3fn_from_float_clamped(float value) {
    if (std::isnan(value)) return e4m3fn_from_float(value);
    return e4m3fn_from_float(std::fmax(-448.0f, std::fmin(448.0f, value)));
}

float e4m3fn_to_float(uint8_t code) {
    const bool negative = (code & 0x80u) != 0;
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7) magnitude = std::numeric_limits<float>::quiet_NaN();
    else if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    else magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
    return negative ? -magnitude : magnitude;
}

}  // namespace vmerge
