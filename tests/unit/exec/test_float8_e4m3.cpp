// The e4m3fn encoder against a reference written here from the format's definition (c10's rules as
// docs/reference/fp8-formats.md §1 states them), not from the encoder: decode every code, pick the
// nearest, ties to the even code; values at or past 480 (and those rounding up onto the 0x7F
// pattern, which c10 treats as if it were 480) are NaN.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "exec/float8_e4m3.h"

namespace vmerge {
namespace {

// Magnitude of code c (0..0x7F); 0x7F is given the value 480, the next step of the grid.
double grid_value(int c) {
    const int e = c >> 3, m = c & 7;
    if (e == 0) return m * std::pow(2.0, -9);
    return (8 + m) * std::pow(2.0, e - 10);
}

uint8_t reference_e4m3(float v) {
    static const std::vector<double> grid = [] {
        std::vector<double> g;
        for (int c = 0; c <= 0x7F; ++c) g.push_back(grid_value(c));
        return g;
    }();
    const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
    const double a = std::fabs(static_cast<double>(v));
    if (std::isnan(v) || a >= 480.0) return sign | 0x7F;
    // The grid rises with the code: the nearest value is one of the two around `a`.
    const int hi = static_cast<int>(std::lower_bound(grid.begin(), grid.end(), a) - grid.begin());
    const int lo = hi > 0 ? hi - 1 : 0;
    const double d_lo = a - grid[lo], d_hi = grid[hi] - a;
    const int best = d_lo < d_hi || (d_lo == d_hi && lo % 2 == 0) ? lo : hi;
    return sign | static_cast<uint8_t>(best);
}

float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

TEST(Float8E4M3, EveryBf16InputMatchesTheReference) {
    int mismatches = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
        const float v = bf16_value(static_cast<uint16_t>(b));
        const uint8_t expected = reference_e4m3(v);
        const uint8_t got = e4m3fn_from_float(v);
        if (got != expected && ++mismatches <= 10)
            ADD_FAILURE() << "bf16 0x" << std::hex << b << " (" << v << "): got 0x" << int(got) << ", expected 0x"
                          << int(expected);
    }
    EXPECT_EQ(mismatches, 0);
}

TEST(Float8E4M3, ClampedNeverGivesNaNForFiniteInput) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const float v = bf16_value(static_cast<uint16_t>(b));
        const uint8_t got = e4m3fn_from_float_clamped(v);
        if (std::isnan(v)) {
            EXPECT_EQ(got & 0x7F, 0x7F);
            continue;
        }
        const float clamped = std::fmax(-448.0f, std::fmin(448.0f, v));
        ASSERT_EQ(got, reference_e4m3(clamped)) << "bf16 0x" << std::hex << b;
        ASSERT_NE(got & 0x7F, 0x7F) << "NaN code for finite bf16 0x" << std::hex << b;
        if (std::fabs(v) < 464.0f) {
            ASSERT_EQ(got, reference_e4m3(v));
        }
    }
}

TEST(Float8E4M3, BranchFreeVariantsEqualTheReference) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const float v = bf16_value(static_cast<uint16_t>(b));
        if (!std::isfinite(v)) continue;
        ASSERT_EQ(e4m3fn_from_finite_clamped(v), e4m3fn_from_float_clamped(v)) << "bf16 0x" << std::hex << b;
    }
    for (uint32_t b = 0; b < 0x7F800000u; b += 4093) {  // binary32 magnitudes, both signs
        for (const uint32_t sign : {0u, 0x80000000u}) {
            const float v = std::bit_cast<float>(b | sign);
            ASSERT_EQ(e4m3fn_from_finite_clamped(v), e4m3fn_from_float_clamped(v)) << std::hex << (b | sign);
        }
    }
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7F) == 0x7F) continue;
        EXPECT_EQ(e4m3fn_finite_to_float(static_cast<uint8_t>(c)), e4m3fn_to_float(static_cast<uint8_t>(c))) << c;
    }
}

TEST(Float8E4M3, WorkedValuesAndTies) {
    EXPECT_EQ(e4m3fn_from_float(1.0f), 0x38);
    EXPECT_EQ(e4m3fn_from_float(1.125f), 0x39);
    EXPECT_EQ(e4m3fn_from_float(std::ldexp(1.0f, -10)), 0x00);       // tie between 0 and 2^-9: even
    EXPECT_EQ(e4m3fn_from_float(3 * std::ldexp(1.0f, -10)), 0x02);   // tie between 1 and 2 (x 2^-9): even
    EXPECT_EQ(e4m3fn_from_float(7.5f * std::ldexp(1.0f, -9)), 0x08); // rounds up to the smallest normal
    EXPECT_EQ(e4m3fn_from_float(463.99f), 0x7E);
    EXPECT_EQ(e4m3fn_from_float(464.0f), 0x7E);
    EXPECT_EQ(e4m3fn_from_float(std::nextafter(464.0f, 500.0f)), 0x7F);
    EXPECT_EQ(e4m3fn_from_float(-0.0f), 0x80);
    EXPECT_EQ(e4m3fn_from_float(-INFINITY), 0xFF);
    EXPECT_EQ(e4m3fn_from_float_clamped(1e30f), 0x7E);
    EXPECT_EQ(e4m3fn_from_float_clamped(-INFINITY), 0xFE);
    // 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): even; 1.1875 between 0x39 and 0x3A.
    EXPECT_EQ(e4m3fn_from_float(1.0625f), 0x38);
    EXPECT_EQ(e4m3fn_from_float(1.1875f), 0x3A);
    // binary32 values (not only bf16 ones) across the subnormal range and around 448..480.
    for (uint32_t b = 0x39000000u; b < 0x3D000000u; b += 97)
        ASSERT_EQ(e4m3fn_from_float(std::bit_cast<float>(b)), reference_e4m3(std::bit_cast<float>(b))) << b;
    for (uint32_t b = 0x43DC0000u; b < 0x43F80000u; b += 7)
        ASSERT_EQ(e4m3fn_from_float(std::bit_cast<float>(b)), reference_e4m3(std::bit_cast<float>(b))) << b;
}

TEST(Float8E4M3, DecodesEveryCode) {
    for (int c = 0; c < 256; ++c) {
        const float got = e4m3fn_to_float(static_cast<uint8_t>(c));
        if ((c & 0x7F) == 0x7F) {
            EXPECT_TRUE(std::isnan(got));
            continue;
        }
        const double expected = (c & 0x80 ? -1.0 : 1.0) * grid_value(c & 0x7F);
        EXPECT_EQ(static_cast<double>(got), expected) << c;
        EXPECT_EQ(e4m3fn_from_float(got), c);  // round trip
    }
}

}  // namespace
}  // namespace vmerge
