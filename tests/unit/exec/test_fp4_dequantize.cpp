// exec/fp4_dequantize.h on codes and scales worked out by hand from the formats' definitions
// (docs/reference/lowbit-formats.md §1.1, §2, §3): E2M1 is sign · {0, 0.5, 1, 1.5, 2, 3, 4, 6}
// by the low three bits, the low nibble of a byte the even column; a UE8M0 byte e is 2^(e − 127);
// an NVFP4 group's multiplier is its e4m3fn scale over the global scale, in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/fp4_dequantize.h"

namespace vmerge {
namespace {

// The 16 E2M1 codes and their values, written out by hand.
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

TEST(Fp4Dequantize, AllSixteenCodesLowNibbleFirstTimesOneScale) {
    // One row of 32 columns, one MXFP4 group: bytes (code 2i+1 << 4 | code 2i) for i = 0..7, twice.
    std::vector<uint8_t> packed(16);
    for (int i = 0; i < 16; ++i) packed[i] = static_cast<uint8_t>((((2 * i + 1) % 16) << 4) | ((2 * i) % 16));
    const float scale = 1.0f;
    std::vector<float> out(32);
    dequantize_fp4_rows(packed.data(), 1, 32, &scale, 32, out.data());
    for (int c = 0; c < 32; ++c) {
        EXPECT_EQ(out[c], kE2M1[c % 16]) << "column " << c;
        EXPECT_EQ(std::signbit(out[c]), std::signbit(kE2M1[c % 16])) << "column " << c;  // code 8 is -0
    }
}

TEST(Fp4Dequantize, Ue8m0ScalesArePowersOfTwoAndByte255IsNan) {
    const std::vector<uint8_t> bytes{127, 128, 126, 0, 1, 254, 134, 120, 255};
    std::vector<float> out(bytes.size());
    fp4_effective_scales(bytes.data(), false, 1.0f, out.data(), out.size());
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 2.0f);
    EXPECT_EQ(out[2], 0.5f);
    EXPECT_EQ(out[3], 0x1p-127f);  // float32 subnormal, exact
    EXPECT_EQ(out[4], 0x1p-126f);
    EXPECT_EQ(out[5], 0x1p127f);
    EXPECT_EQ(out[6], 128.0f);
    EXPECT_EQ(out[7], 1.0f / 128.0f);
    EXPECT_TRUE(std::isnan(out[8]));
}

TEST(Fp4Dequantize, Nvfp4ScaleIsE4m3OverTheGlobalScaleInFloat32) {
    // e4m3fn: 0x38 = 1.0, 0x7E = 448, 0x01 = 2^-9 (smallest subnormal), 0x30 = 0.5, 0x7F NaN.
    const std::vector<uint8_t> bytes{0x38, 0x7E, 0x01, 0x30, 0x7F};
    std::vector<float> out(bytes.size());
    fp4_effective_scales(bytes.data(), true, 3.0f, out.data(), out.size());
    EXPECT_EQ(out[0], 1.0f / 3.0f);
    EXPECT_EQ(out[1], 448.0f / 3.0f);
    EXPECT_EQ(out[2], 0x1p-9f / 3.0f);
    EXPECT_EQ(out[3], 0.5f / 3.0f);
    EXPECT_TRUE(std::isnan(out[4]));
}

TEST(Fp4Dequantize, EachGroupItsOwnScaleAndEachRowItsOwnScaleRow) {
    // 2 rows x 32 columns in NVFP4 groups of 16: scales [[2, 0.25], [8, 1/3]].
    const float third = 1.0f / 3.0f;
    const std::vector<float> scales{2.0f, 0.25f, 8.0f, third};
    std::vector<uint8_t> packed(32, 0x00);
    packed[0] = 0x7F;       // row 0: column 0 code 0xF (-6), column 1 code 0x7 (6)
    packed[8] = 0x21;       // row 0: column 16 code 1 (0.5), column 17 code 2 (1.0)
    packed[16 + 7] = 0xB0;  // row 1: column 14 code 0 (0), column 15 code 0xB (-1.5)
    packed[16 + 15] = 0x55; // row 1: columns 30, 31 code 5 (3)
    std::vector<float> out(64);
    dequantize_fp4_rows(packed.data(), 2, 32, scales.data(), 16, out.data());
    EXPECT_EQ(out[0], -12.0f);
    EXPECT_EQ(out[1], 12.0f);
    EXPECT_EQ(out[16], 0.125f);
    EXPECT_EQ(out[17], 0.25f);
    EXPECT_EQ(out[32 + 14], 0.0f);
    EXPECT_EQ(out[32 + 15], -12.0f);
    EXPECT_EQ(out[32 + 30], 3.0f * third);  // one float32 multiplication
    EXPECT_EQ(out[32 + 31], 3.0f * third);
    EXPECT_EQ(out[2], 0.0f);
}

}  // namespace
}  // namespace vmerge
