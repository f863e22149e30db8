// The FP8 kernels of exec/fp8_quantize.h on values worked out by hand from
// docs/reference/fp8-formats.md and lowbit-formats.md §4-§5.
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
    quantize_fp8_blocks(x.data(), 2, 130, Fp8ScaleFormat::Float, codes.data(), scales, error, "w", 0);
    EXPECT_EQ(scales[0], 1.0f);
    EXPECT_EQ(scales[1], 1e-4f / 448.0f);
    EXPECT_EQ(codes[0], 0x7E);
    EXPECT_EQ(codes[1], 0xB8);  // tie between 1.0 and 1.125: even
    EXPECT_EQ(codes[129], 0x00);
    EXPECT_EQ(error.count, 260u);
    x[5] = NAN;
    EXPECT_THROW(quantize_fp8_blocks(x.data(), 2, 130, Fp8ScaleFormat::Float, codes.data(), scales, error, "w", 0), Error);
}

TEST(Fp8Kernels, ChannelScaleAndQuotientAreRoundedToBf16) {
    // Row 0: amax 1 -> s = bf16(1/448) = 146 * 2^-16; 1/s = 448.88 -> bf16 448 -> 0x7E;
    // -0.5/s = -224.44 -> bf16 -224 -> 0xF6. Row 1 is zero: s = eps(bf16) = 2^-7.
    // -0.0 -> +0 (compressed-tensors' zero point is added to the quotient), code 0x00.
    const float x[6] = {1.0f, -0.5f, -0.0f, 0.0f, 0.0f, 0.0f};
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

float bf16_value(uint16_t bits) {
    float value;
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    std::memcpy(&value, &wide, 4);
    return value;
}

TEST(Fp8Kernels, Ue8m0IsTheLeastPowerOfTwoNotBelow) {
    EXPECT_EQ(ceil_to_ue8m0(1.0f), 1.0f);
    EXPECT_EQ(ceil_to_ue8m0(std::nextafter(1.0f, 2.0f)), 2.0f);  // one mantissa bit set: up
    EXPECT_EQ(ceil_to_ue8m0(0.75f), 1.0f);
    EXPECT_EQ(ceil_to_ue8m0(std::nextafter(0.5f, 0.0f)), 0.5f);
    EXPECT_EQ(ceil_to_ue8m0(1e-4f / 448.0f), std::ldexp(1.0f, -22));  // the all-zero block's floor
    EXPECT_EQ(ceil_to_ue8m0(std::ldexp(1.0f, -126)), std::ldexp(1.0f, -126));
    EXPECT_EQ(ceil_to_ue8m0(3.0e38f), std::ldexp(1.0f, 127));  // exponent field 254 at most
    // Every normal exponent: a power of two stays, one ulp above goes to the next, one ulp below stays.
    for (int e = -125; e <= 126; ++e) {
        const float p = std::ldexp(1.0f, e);
        EXPECT_EQ(ceil_to_ue8m0(p), p) << e;
        EXPECT_EQ(ceil_to_ue8m0(std::nextafter(p, INFINITY)), 2.0f * p) << e;
        EXPECT_EQ(ceil_to_ue8m0(std::nextafter(p, 0.0f)), p) << e;
    }
}

TEST(Fp8Kernels, Ue8m0BlockScalesArePowersOfTwoAndCodesUseThem) {
    // 1 x 512: four column blocks. amax 448 -> s 1 (already a power of two); amax 449 -> 2,
    // 449 / 2 = 224.5 -> 224 (steps of 16 there) = 0x76; all zero -> 2^-22; a float32 subnormal
    // alone is below the 1e-4 floor -> 2^-22, and its code rounds to zero keeping its sign.
    std::vector<float> x(512, 0.0f);
    x[0] = 448.0f;
    x[128] = 449.0f;
    x[129] = -1.0f;  // -0.5 -> 0xB0
    x[384] = -1e-40f;
    std::vector<uint8_t> codes(x.size());
    float scales[4];
    QuantError error;
    quantize_fp8_blocks(x.data(), 1, 512, Fp8ScaleFormat::Ue8m0, codes.data(), scales, error, "w", 0);
    EXPECT_EQ(scales[0], 1.0f);
    EXPECT_EQ(scales[1], 2.0f);
    EXPECT_EQ(scales[2], std::ldexp(1.0f, -22));
    EXPECT_EQ(scales[3], std::ldexp(1.0f, -22));
    EXPECT_EQ(codes[0], 0x7E);
    EXPECT_EQ(codes[128], 0x76);
    EXPECT_EQ(codes[129], 0xB0);
    EXPECT_EQ(codes[256], 0x00);
    EXPECT_EQ(codes[384], 0x80);
    // The largest binary32 weight: 3.4e38 / 448 = 2^119.2 rounds up to s = 2^120, and the code is
    // 3.4e38 / 2^120 = 255.99998 -> 256 = 0x78.
    x[0] = 3.4028235e38f;
    quantize_fp8_blocks(x.data(), 1, 512, Fp8ScaleFormat::Ue8m0, codes.data(), scales, error, "w", 0);
    EXPECT_EQ(scales[0], std::ldexp(1.0f, 120));
    EXPECT_EQ(codes[0], 0x78);
    x[300] = INFINITY;
    EXPECT_THROW(quantize_fp8_blocks(x.data(), 1, 512, Fp8ScaleFormat::Ue8m0, codes.data(), scales, error, "w", 0),
                 Error);
}

TEST(Fp8Kernels, CtBlockScalesAreRoundedToBf16PerBlockWithEpsForZero) {
    // 130 x 256 (bf16): two 128-row stripes (the second of 2 rows) by two column blocks.
    std::vector<float> x(130 * 256, 0.0f);
    x[0] = 1.0f;     // block (0,0): amax 1 -> s = bf16(1/448) = 146 * 2^-16; 1 -> 0x7E
    x[257] = -0.5f;  // row 1, column 1: -0.5/s = -224.44 -> bf16 -224 -> 0xF6
    // block (0,1) all zero -> eps(bf16) = 2^-7
    x[128 * 256 + 5] = 448.0f;  // block (1,0): s = 1
    // block (1,1): a bf16 subnormal whose amax/448 rounds to zero in bf16 -> eps; the code
    // rounds to zero, keeping the sign
    x[129 * 256 + 200] = -std::ldexp(1.0f, -130);
    x[2] = -0.0f;  // compressed-tensors adds its zero point to the quotient: -0 + 0 = +0, code 0x00
    std::vector<uint8_t> codes(x.size());
    uint16_t scales[4];
    QuantError error;
    quantize_fp8_ct_blocks(x.data(), 130, 256, DType::BF16, codes.data(), reinterpret_cast<unsigned char*>(scales),
                           error, "w", 0);
    EXPECT_EQ(bf16_value(scales[0]), 146.0f * std::ldexp(1.0f, -16));
    EXPECT_EQ(scales[1], 0x3C00);
    EXPECT_EQ(bf16_value(scales[2]), 1.0f);
    EXPECT_EQ(scales[3], 0x3C00);
    EXPECT_EQ(codes[0], 0x7E);
    EXPECT_EQ(codes[257], 0xF6);
    EXPECT_EQ(codes[2], 0x00);
    EXPECT_EQ(codes[128 * 256 + 5], 0x7E);
    EXPECT_EQ(codes[129 * 256 + 200], 0x80);
    EXPECT_EQ(error.count, 130u * 256u);
}

TEST(Fp8Kernels, CtBlockInFloat32AndFloat16) {
    // F32: s = 3/448 in binary32, 3/s = 448.00003 -> clamped to 448 = 0x7E.
    std::vector<float> x(2 * 128, 0.0f);
    x[0] = 3.0f;
    x[128] = 65504.0f;  // row 1 is in the same block
    std::vector<uint8_t> codes(x.size());
    float scale32;
    QuantError error;
    quantize_fp8_ct_blocks(x.data(), 2, 128, DType::F32, codes.data(), reinterpret_cast<unsigned char*>(&scale32),
                           error, "w", 0);
    EXPECT_EQ(scale32, 65504.0f / 448.0f);
    EXPECT_EQ(codes[128], 0x7E);
    // F16: s = f16(65504 / 448 = 146.21) = 146.25; 65504 / 146.25 = 447.89 -> f16 448 -> 0x7E.
    uint16_t scale16;
    quantize_fp8_ct_blocks(x.data(), 2, 128, DType::F16, codes.data(), reinterpret_cast<unsigned char*>(&scale16),
                           error, "w", 0);
    EXPECT_EQ(scale16, 0x5892);  // 146.25 = 1.142578125 * 2^7
    EXPECT_EQ(codes[128], 0x7E);
    x[3] = NAN;
    EXPECT_THROW(quantize_fp8_ct_blocks(x.data(), 2, 128, DType::F16, codes.data(),
                                        reinterpret_cast<unsigned char*>(&scale16), error, "w", 0),
                 Error);
}

}  // namespace
}  // namespace vmerge
