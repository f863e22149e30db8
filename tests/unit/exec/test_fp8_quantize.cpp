// The two FP8 kernels of exec/fp8_quantize.h on values worked out by hand from
// docs/reference/fp8-formats.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/fp8_quantize.h"

namespace vmerge {
namespace {

TEST(Fp8Kernels, BlockScaleIsAmaxOver448AndCodesUseItsInverse) {
    // A 2 x 130 weight: two column blocks, the second partial (2 columns).
    std::vector<float> x(2 * 130, 0.0f);
    x[0] = 448.0f;  // block 0: amax 448, scale 1, codes are e4m3 of the values
    x[1] = -1.0625f;
    x[128] = 0.0f;  // block 1: all zero -> the 1e-4 floor
    std::vector<uint8_t> codes(x.size());
    float scales[2];
    QuantError error;
    quantize_fp8_blocks(x.data(), 2, 130, codes.data(), scales, error, "w", 0);
    EXPECT_EQ(scales[0], 1.0f);
    EXPECT_EQ(scales[1], 1e-4f / 448.0f);
    EXPECT_EQ(codes[0], 0x7E);
    EXPECT_EQ(codes[1], 0xB8);  // tie between 1.0 and 1.125: even
    EXPECT_EQ(codes[129], 0x00);
    EXPECT_EQ(error.count, 260u);
    x[5] = NAN;
    EXPECT_THROW(quantize_fp8_blocks(x.data(), 2, 130, codes.data(), scales, error, "w", 0), Error);
}

TEST(Fp8Kernels, ChannelScaleAndQuotientAreRoundedToBf16) {
    // Row 0: amax 1 -> s = bf16(1/448) = 146 * 2^-16; 1/s = 448.88 -> bf16 448 -> 0x7E;
    // -0.5/s = -224.44 -> bf16 -224 -> 0xF6. Row 1 is zero: s = eps(bf16) = 2^-7.
    const float x[6] = {1.0f, -0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
    uint8_t codes[6];
    uint16_t scales[2];
    QuantError error;
    quantize_fp8_channels(x, 2, 3, DType::BF16, codes, reinterpret_cast<unsigned char*>(scales), error, "w", 0);
    float s0;
    const uint32_t bits = static_cast<uint32_t>(scales[0]) << 16;
    std::memcpy(&s0, &bits, 4);
    EXPECT_EQ(s0, 146.0f * std::ldexp(1.0f, -16));
    EXPECT_EQ(scales[1], 0x3C00);
    EXPECT_EQ(codes[0], 0x7E);
    EXPECT_EQ(codes[1], 0xF6);
    EXPECT_EQ(codes[2], 0x00);
}

}  // namespace
}  // namespace vmerge
