// exec/block_dequantize.h on codes and scales worked out by hand from the e4m3fn definition
// (docs/reference/fp8-formats.md §1): value(code) · scale of its block, in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "exec/block_dequantize.h"

namespace vmerge {
namespace {

TEST(BlockDequantize, EachValueTimesTheScaleOfItsBlockWithPartialEdgeBlocks) {
    // A 3 x 5 weight in blocks of 2 x 2: a 2 x 3 scale grid, the last row and column partial.
    const std::vector<float> scales{1.0f, 2.0f, 4.0f,  //
                                    0.5f, 8.0f, 0.25f};
    std::vector<uint8_t> codes(15, 0x38);  // 1.0 everywhere
    codes[4] = 0x7E;                       // row 0, column 4: 448 in block (0, 2)
    codes[5 + 2] = 0xB8;                   // row 1, column 2: -1.0 in block (0, 1)
    codes[10 + 3] = 0x01;                  // row 2, column 3: 2^-9 (smallest subnormal) in block (1, 1)
    std::vector<float> out(15);
    dequantize_block_fp8(codes.data(), 0, 3, 5, scales.data(), 3, 2, 2, out.data());
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[2], 2.0f);
    EXPECT_EQ(out[4], 448.0f * 4.0f);
    EXPECT_EQ(out[5 + 2], -2.0f);
    EXPECT_EQ(out[10 + 0], 0.5f);
    EXPECT_EQ(out[10 + 3], std::ldexp(1.0f, -9) * 8.0f);
    EXPECT_EQ(out[10 + 4], 0.25f);
}

TEST(BlockDequantize, RowsFromTheMiddleUseTheirOwnScaleRowsAndNanStaysNan) {
    // Rows 2..3 of a 4 x 2 weight in blocks of 2 x 2: scale row 1 applies.
    const std::vector<float> scales{3.0f, 5.0f};
    const std::vector<uint8_t> codes{0x40, 0x7F, 0xC8, 0x80};  // 2.0, NaN, -4.0, -0
    std::vector<float> out(4);
    dequantize_block_fp8(codes.data(), 2, 4, 2, scales.data(), 1, 2, 2, out.data());
    EXPECT_EQ(out[0], 10.0f);
    EXPECT_TRUE(std::isnan(out[1]));
    EXPECT_EQ(out[2], -20.0f);
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_TRUE(std::signbit(out[3]));
}

TEST(BlockDequantize, EveryCodeIsItsE4m3fnValue) {
    // All 256 codes at scale 1 against the format's definition: (8 + m)·2^(e − 10), m·2^−9 when e = 0.
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    std::vector<float> out(256);
    const float one = 1.0f;
    dequantize_block_fp8(codes.data(), 0, 1, 256, &one, 1, 1, 256, out.data());
    for (int c = 0; c < 256; ++c) {
        const int e = (c >> 3) & 15, m = c & 7;
        if ((c & 0x7F) == 0x7F) {
            EXPECT_TRUE(std::isnan(out[c])) << c;
            continue;
        }
        const float magnitude = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(8.0f + m, e - 10);
        EXPECT_EQ(out[c], (c & 0x80) ? -magnitude : magnitude) << c;
    }
}

TEST(BlockDequantize, TheProductIsOneFloat32Rounding) {
    // 1.125 · (1 + 2^-23) is not a float: it rounds once, to nearest even.
    const float scale = std::nextafter(1.0f, 2.0f);
    const std::vector<uint8_t> codes{0x39};  // 1.125
    float out = 0;
    dequantize_block_fp8(codes.data(), 0, 1, 1, &scale, 1, 128, 128, &out);
    EXPECT_EQ(out, 1.125f * scale);
}

}  // namespace
}  // namespace vmerge
