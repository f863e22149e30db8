#include "exec/float8_e4m3.h"

#include <array>
#include <limits>

namespace vmerge {
namespace {

float decode(uint8_t code) {
    const bool negative = (code & 0x80u) != 0;
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7) magnitude = std::numeric_limits<float>::quiet_NaN();
    else if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    else magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
    return negative ? -magnitude : magnitude;
}

}  // namespace

float e4m3fn_to_float(uint8_t code) {
    static const std::array<float, 256> table = [] {
        std::array<float, 256> t{};
        for (int c = 0; c < 256; ++c) t[c] = decode(static_cast<uint8_t>(c));
        return t;
    }();
    return table[code];
}

}  // namespace vmerge
