// Unit tests for the scalar casts and can_cast of src/core/dtype.h. Expected bit patterns are worked
// out by hand from the IEEE-754 binary32 / binary16 / bfloat16 layouts and round-to-nearest-even.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"

namespace vmerge {
namespace {

float f32(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

// --- f32_to_bf16 -------------------------------------------------------------------------

TEST(F32ToBf16, ExactValuesKeepTheirUpperHalf) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(f32_to_bf16(-1.0f), 0xBF80);
    EXPECT_EQ(f32_to_bf16(2.0f), 0x4000);
    EXPECT_EQ(f32_to_bf16(0.5f), 0x3F00);
    EXPECT_EQ(f32_to_bf16(-3.0f), 0xC040);
    EXPECT_EQ(f32_to_bf16(1.5f), 0x3FC0);
    EXPECT_EQ(f32_to_bf16(f32(0x12340000)), 0x1234);
}

TEST(F32ToBf16, TiesRoundToEven) {
    // Lower half exactly 0x8000: halfway between two bf16 values.
    EXPECT_EQ(f32_to_bf16(f32(0x3F808000)), 0x3F80);  // 0x3F80 is even: stays
    EXPECT_EQ(f32_to_bf16(f32(0x3F818000)), 0x3F82);  // 0x3F81 is odd: up to even
    EXPECT_EQ(f32_to_bf16(f32(0xBF808000)), 0xBF80);  // sign does not matter
    EXPECT_EQ(f32_to_bf16(f32(0xBF818000)), 0xBF82);
}

TEST(F32ToBf16, RoundsToNearestOffTies) {
    EXPECT_EQ(f32_to_bf16(f32(0x3F808001)), 0x3F81);  // just above half: up
    EXPECT_EQ(f32_to_bf16(f32(0x3F807FFF)), 0x3F80);  // just below half: down
    EXPECT_EQ(f32_to_bf16(f32(0x3F80FFFF)), 0x3F81);
    EXPECT_EQ(f32_to_bf16(f32(0x3F800001)), 0x3F80);
    // Rounding up carries into the exponent: 1.99999988 -> 2.0.
    EXPECT_EQ(f32_to_bf16(f32(0x3FFFFFFF)), 0x4000);
    EXPECT_EQ(f32_to_bf16(f32(0xBFFFFFFF)), 0xC000);
}

TEST(F32ToBf16, InfinitiesAndZeros) {
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
    EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
    EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

TEST(F32ToBf16, Denormals) {
    EXPECT_EQ(f32_to_bf16(f32(0x00000001)), 0x0000);  // far below half a bf16 ulp
    EXPECT_EQ(f32_to_bf16(f32(0x80000001)), 0x8000);
    EXPECT_EQ(f32_to_bf16(f32(0x00010000)), 0x0001);  // exact bf16 denormal
    EXPECT_EQ(f32_to_bf16(f32(0x80010000)), 0x8001);
    EXPECT_EQ(f32_to_bf16(f32(0x00008000)), 0x0000);  // tie, 0 is even
    EXPECT_EQ(f32_to_bf16(f32(0x00018000)), 0x0002);  // tie, 1 is odd
    EXPECT_EQ(f32_to_bf16(f32(0x00008001)), 0x0001);
    // Largest f32 denormal rounds up to the smallest normal.
    EXPECT_EQ(f32_to_bf16(f32(0x007FFFFF)), 0x0080);
}

TEST(F32ToBf16, OverflowGivesInfinity) {
    EXPECT_EQ(f32_to_bf16(FLT_MAX), 0x7F80);
    EXPECT_EQ(f32_to_bf16(-FLT_MAX), 0xFF80);
    EXPECT_EQ(f32_to_bf16(f32(0x7F7F7FFF)), 0x7F7F);  // below half: largest finite bf16
    EXPECT_EQ(f32_to_bf16(f32(0x7F7F8000)), 0x7F80);  // tie, 0x7F7F odd: up to inf
    EXPECT_EQ(f32_to_bf16(f32(0x7F7E8000)), 0x7F7E);  // tie, 0x7F7E even: stays
}

TEST(F32ToBf16, EveryNaNBecomesFFFF) {
    for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu,
                          0x7FA12345u, 0x7F80FFFFu, 0x7FBF0000u, 0xFFE00001u}) {
        ASSERT_TRUE(std::isnan(f32(bits)));
        EXPECT_EQ(f32_to_bf16(f32(bits)), 0xFFFF) << std::hex << bits;
    }
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()), 0xFFFF);
    EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::quiet_NaN()), 0xFFFF);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::signaling_NaN()), 0xFFFF);
}

// --- f32_to_f16 --------------------------------------------------------------------------

TEST(F32ToF16, NormalValues) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xC000);
    EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
    EXPECT_EQ(f32_to_f16(1.5f), 0x3E00);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);  // largest finite half
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal half
    EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -14)), 0x8400);
    EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -10)), 0x3C01);  // 1 + 2^-10: exact
    EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
    EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xFC00);
}

TEST(F32ToF16, SubnormalResults) {
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);       // smallest subnormal
    EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);       // tie between 0 and 1: even
    EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -25)), 0x8000);
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);       // 0.75 ulp: rounds up
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);       // 0.25 ulp: rounds down
    EXPECT_EQ(f32_to_f16(f32(0x33000001)), 0x0001);             // just above half an ulp
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);       // 1.5 ulp: tie, up to even 2
    EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);       // 2.5 ulp: tie, down to even 2
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -15)), 0x0200);
    EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03FF);    // largest subnormal
    // 1023.5 ulp: tie between 0x03FF (odd) and 0x0400 (the smallest normal).
    EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);
    EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
    EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
    EXPECT_EQ(f32_to_f16(f32(0x00000001)), 0x0000);  // f32 denormal
}

TEST(F32ToF16, Overflow) {
    EXPECT_EQ(f32_to_f16(65519.0f), 0x7BFF);  // below 65520: rounds to 65504
    EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);  // halfway to 65536 (odd mantissa): infinity
    EXPECT_EQ(f32_to_f16(-65520.0f), 0xFC00);
    EXPECT_EQ(f32_to_f16(65536.0f), 0x7C00);
    EXPECT_EQ(f32_to_f16(1e10f), 0x7C00);
    EXPECT_EQ(f32_to_f16(FLT_MAX), 0x7C00);
    EXPECT_EQ(f32_to_f16(-FLT_MAX), 0xFC00);
}

TEST(F32ToF16, TiesInTheNormalRange) {
    const float ulp11 = std::ldexp(1.0f, -11);  // half of a half-precision ulp at 1.0
    EXPECT_EQ(f32_to_f16(1.0f + ulp11), 0x3C00);                             // tie, even stays
    EXPECT_EQ(f32_to_f16(1.0f + 3 * ulp11), 0x3C02);                         // tie, odd goes up
    EXPECT_EQ(f32_to_f16(1.0f + ulp11 + std::ldexp(1.0f, -23)), 0x3C01);     // above half
    EXPECT_EQ(f32_to_f16(1.0f + ulp11 - std::ldexp(1.0f, -23)), 0x3C00);     // below half
    EXPECT_EQ(f32_to_f16(-(1.0f + 3 * ulp11)), 0xBC02);
    // At 2048 the ulp is 2: 2049 is a tie between 2048 (even) and 2050.
    EXPECT_EQ(f32_to_f16(2049.0f), 0x6800);
    EXPECT_EQ(f32_to_f16(2051.0f), 0x6802);
    // Rounding up carries into the exponent.
    EXPECT_EQ(f32_to_f16(std::ldexp(4095.0f, -1)), 0x6800);  // 2047.5: tie, 0x67FF odd -> 2048
}

TEST(F32ToF16, NaNStaysNaN) {
    for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7FA12345u,
                          0x7F802000u}) {
        const uint16_t h = f32_to_f16(f32(bits));
        EXPECT_EQ(h & 0x7C00, 0x7C00) << std::hex << bits;
        EXPECT_NE(h & 0x03FF, 0) << std::hex << bits << " became infinity";
    }
}

// --- widening: every bit pattern ---------------------------------------------------------

// Value of a binary16 pattern from its definition.
double half_value(uint16_t h) {
    const int sign = (h >> 15) ? -1 : 1;
    const int exponent = (h >> 10) & 0x1F;
    const int mantissa = h & 0x3FF;
    if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -24);
    if (exponent == 31) return sign * std::numeric_limits<double>::infinity();
    return sign * std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

// Value of a bfloat16 pattern from its definition.
double bf16_value(uint16_t b) {
    const int sign = (b >> 15) ? -1 : 1;
    const int exponent = (b >> 7) & 0xFF;
    const int mantissa = b & 0x7F;
    if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -133);
    if (exponent == 255) return sign * std::numeric_limits<double>::infinity();
    return sign * std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
}

TEST(F16ToF32, AllPatternsWidenExactlyAndRoundTrip) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t h = static_cast<uint16_t>(i);
        const float f = f16_to_f32(h);
        const bool is_nan = ((h & 0x7C00) == 0x7C00) && (h & 0x3FF);
        if (is_nan) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << i;
            const uint16_t back = f32_to_f16(f);
            ASSERT_TRUE(((back & 0x7C00) == 0x7C00) && (back & 0x3FF)) << std::hex << i;
            continue;
        }
        ASSERT_EQ(static_cast<double>(f), half_value(h)) << std::hex << i;
        ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
        ASSERT_EQ(f32_to_f16(f), h) << std::hex << i;
    }
}

TEST(Bf16ToF32, AllPatternsWidenExactlyAndRoundTrip) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t b = static_cast<uint16_t>(i);
        const float f = bf16_to_f32(b);
        const bool is_nan = ((b & 0x7F80) == 0x7F80) && (b & 0x7F);
        if (is_nan) {
            ASSERT_TRUE(std::isnan(f)) << std::hex << i;
            ASSERT_EQ(f32_to_bf16(f), 0xFFFF) << std::hex << i;
            continue;
        }
        ASSERT_EQ(static_cast<double>(f), bf16_value(b)) << std::hex << i;
        ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << i;
        ASSERT_EQ(f32_to_bf16(f), b) << std::hex << i;
    }
}

TEST(F16ToF32, SpotValues) {
    EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
    EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
    EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);
    EXPECT_EQ(f16_to_f32(0x7C00), std::numeric_limits<float>::infinity());
    EXPECT_EQ(f16_to_f32(0xFC00), -std::numeric_limits<float>::infinity());
    EXPECT_EQ(bits_of(f16_to_f32(0x8000)), 0x80000000u);
    EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
    EXPECT_EQ(bits_of(bf16_to_f32(0x8001)), 0x80010000u);
}

TEST(CanCast, FloatingTypesOnly) {
    const DType floats[] = {DType::F64, DType::F32, DType::F16, DType::BF16};
    for (DType a : floats)
        for (DType b : floats) EXPECT_TRUE(can_cast(a, b));
    EXPECT_FALSE(can_cast(DType::I32, DType::F32));
    EXPECT_FALSE(can_cast(DType::I64, DType::BF16));
    EXPECT_FALSE(can_cast(DType::U8, DType::F16));
    EXPECT_FALSE(can_cast(DType::BOOL, DType::F64));
    EXPECT_FALSE(can_cast(DType::F32, DType::I64));
    EXPECT_FALSE(can_cast(DType::F16, DType::I8));
    EXPECT_TRUE(can_cast(DType::I64, DType::I64));  // identical types copy
    EXPECT_TRUE(can_cast(DType::BOOL, DType::BOOL));
}

}  // namespace
}  // namespace vmerge
