// The 4-bit float kernels (exec/float4_e2m1.h, exec/fp4_quantize.h) against values derived by
// hand from compressed-tensors' arithmetic (docs/reference/lowbit-formats.md §1.1, §2.2, §3.3).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/finite_weights.h"
#include "exec/float4_e2m1.h"
#include "exec/float8_e4m3.h"
#include "exec/fp4_quantize.h"

namespace vmerge {
namespace {

// The code of the i-th value of a packed row (even column in the low nibble).
uint8_t nibble(const std::vector<uint8_t>& packed, size_t i) {
    return static_cast<uint8_t>(i % 2 ? packed[i / 2] >> 4 : packed[i / 2] & 0xF);
}

TEST(E2m1, EveryCodeDecodes) {
    const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int c = 0; c < 16; ++c) {
        const float v = e2m1_value(static_cast<uint8_t>(c));
        EXPECT_EQ(std::fabs(v), magnitudes[c & 7]) << c;
        EXPECT_EQ(std::signbit(v), c >= 8) << c;  // 0x8 is -0.0
        if (c != 8) {
            EXPECT_EQ(e2m1_code(v), c) << c;  // every value is its own code
        }
    }
}

TEST(E2m1, TiesGoToTheEvenCode) {
    // compressed-tensors' thresholds: <= 0.25 -> 0, < 0.75 -> 0.5, <= 1.25 -> 1, < 1.75 -> 1.5,
    // <= 2.5 -> 2, < 3.5 -> 3, <= 5 -> 4, above -> 6; each tie on the code with an even mantissa.
    const std::vector<std::pair<float, uint8_t>> cases{
        {0.25f, 0}, {std::nextafter(0.25f, 1.0f), 1}, {std::nextafter(0.75f, 0.0f), 1}, {0.75f, 2},
        {1.25f, 2}, {std::nextafter(1.25f, 2.0f), 3}, {std::nextafter(1.75f, 0.0f), 3}, {1.75f, 4},
        {2.5f, 4},  {std::nextafter(2.5f, 3.0f), 5},  {std::nextafter(3.5f, 0.0f), 5}, {3.5f, 6},
        {5.0f, 6},  {std::nextafter(5.0f, 6.0f), 7},  {6.0f, 7},  {1e30f, 7}};
    for (const auto& [t, code] : cases) {
        EXPECT_EQ(e2m1_code(t), code) << t;
        EXPECT_EQ(e2m1_code(-t), code | 0x8) << -t;
    }
}

TEST(E2m1, SignOfZero) {
    EXPECT_EQ(e2m1_code(0.0f), 0x0);
    EXPECT_EQ(e2m1_code(-0.0f), 0x0);     // torch.sign(-0.0) is +0: the product is +0
    EXPECT_EQ(e2m1_code(-0.1f), 0x8);     // a negative value rounded to zero keeps its sign
    EXPECT_EQ(e2m1_code(-1e-45f), 0x8);   // the smallest float32 subnormal too
}

TEST(MxRoundToPowerOf2, RoundsUpFromThreeQuartersOfTheMantissa) {
    EXPECT_EQ(mx_round_to_power_2(4.0f, DType::BF16), 4.0f);
    EXPECT_EQ(mx_round_to_power_2(6.5f, DType::BF16), 4.0f);    // 1.625 * 4: down
    EXPECT_EQ(mx_round_to_power_2(7.0f, DType::BF16), 8.0f);    // 1.75 * 4: up
    EXPECT_EQ(mx_round_to_power_2(7.0f, DType::F16), 8.0f);
    EXPECT_EQ(mx_round_to_power_2(7.0f, DType::F32), 8.0f);
    EXPECT_EQ(mx_round_to_power_2(std::nextafter(7.0f, 0.0f), DType::F32), 4.0f);
    EXPECT_EQ(mx_round_to_power_2(0.0f, DType::BF16), 0.0f);
    EXPECT_EQ(mx_round_to_power_2(std::ldexp(1.0f, -133), DType::BF16), 0.0f);  // bf16 subnormal 0x0001
    EXPECT_TRUE(std::isinf(mx_round_to_power_2(65504.0f, DType::F16)));       // 1.999 * 2^15: up past the top
}

// One MXFP4 row of 32 values.
struct MxRow {
    std::vector<uint8_t> packed = std::vector<uint8_t>(16);
    uint8_t scale = 0;
};
MxRow mxfp4(const std::vector<float>& row, DType dtype = DType::BF16) {
    MxRow out;
    QuantError error;
    quantize_mxfp4_rows(row.data(), 1, 32, dtype, out.packed.data(), &out.scale, error, "w.weight", 0);
    return out;
}

TEST(Mxfp4, ScaleIsTheRoundedPowerOfTwoOverFour) {
    // amax 4 -> p = 4, e = 127 + 2 - 2 = 127, scale 1: t = w, every tie of the table at once.
    std::vector<float> row{4.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -0.0f, -3.0f};
    row.resize(32, 0.0f);
    const MxRow q = mxfp4(row);
    EXPECT_EQ(q.scale, 127);
    const std::vector<uint8_t> codes{6, 0, 2, 2, 4, 4, 6, 6, 0x8, 0x0, 0xD};
    for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(nibble(q.packed, i), codes[i]) << i;
    // amax 3.5 = 1.75 * 2: rounds up to 4, the same scale; 3.4 rounds down to 2: e = 126, scale 0.5.
    row[0] = 3.5f;
    EXPECT_EQ(mxfp4(row).scale, 127);
    std::vector<float> low(32, 0.0f);
    low[0] = 3.4f;
    low[1] = 0.25f;
    const MxRow half = mxfp4(low);
    EXPECT_EQ(half.scale, 126);
    EXPECT_EQ(nibble(half.packed, 0), 0x7);  // 3.4 / 0.5 = 6.8, clamped to 6
    EXPECT_EQ(nibble(half.packed, 1), 0x1);  // 0.25 / 0.5 = 0.5
}

TEST(Mxfp4, AllZeroGroupGetsTheSmallestExponent) {
    const MxRow q = mxfp4(std::vector<float>(32, 0.0f));
    EXPECT_EQ(q.scale, 0);  // log2(0) = -inf, clamped to 0: scale 2^-127 (a bf16 subnormal, not 0)
    for (uint8_t b : q.packed) EXPECT_EQ(b, 0);
}

TEST(Mxfp4, Fp16ScaleThatUnderflowsBecomesOne) {
    // amax 2^-13 in F16: p = 2^-13, e = 127 - 13 - 2 = 112, scale 2^-15 (an F16 subnormal); t = 4.
    std::vector<float> row(32, 0.0f);
    row[0] = std::ldexp(1.0f, -13);
    const MxRow normal = mxfp4(row, DType::F16);
    EXPECT_EQ(normal.scale, 112);
    EXPECT_EQ(nibble(normal.packed, 0), 6);
    // amax 2^-20, an F16 subnormal: masking its bits to the exponent field leaves p = 0, e = 0, and
    // 2^-127 is 0 in F16, so the scale is compressed-tensors' uint8 eps 1 (e = 127); codes 0.
    row[0] = std::ldexp(1.0f, -20);
    const MxRow q = mxfp4(row, DType::F16);
    EXPECT_EQ(q.scale, 127);
    EXPECT_EQ(nibble(q.packed, 0), 0);
}

TEST(Mxfp4, QuotientRoundedToTheWeightDtypeLosesTheSignOfAnUnderflow) {
    // A bf16 subnormal -2^-133 over scale 2 (amax 8: e = 128) is -2^-134, which rounds to -0 in
    // bf16 (a tie, to the even 0): code 0x0. In float32 the quotient would stay negative (0x8).
    std::vector<float> row(32, 0.0f);
    row[0] = 8.0f;
    row[1] = -std::ldexp(1.0f, -133);
    const MxRow q = mxfp4(row);
    EXPECT_EQ(q.scale, 128);
    EXPECT_EQ(nibble(q.packed, 1), 0x0);
    EXPECT_EQ(nibble(mxfp4(row, DType::F32).packed, 1), 0x8);
}

TEST(Mxfp4, GroupWhosePowerOfTwoIsInfiniteIsRefused) {
    std::vector<float> row(32, 0.0f);
    row[1] = 65504.0f;
    try {
        mxfp4(row, DType::F16);
        FAIL() << "expected an error";
    } catch (const InputValueError& e) {
        EXPECT_NE(std::string(e.what()).find("w.weight: row 0, columns 0..31: "), std::string::npos) << e.what();
    }
}

TEST(Mxfp4, NanIsRefusedNamingRowAndColumn) {
    std::vector<float> row(64, 1.0f);
    row[32 + 5] = std::nanf("");
    std::vector<uint8_t> packed(32), scales(2);
    QuantError error;
    try {
        quantize_mxfp4_rows(row.data(), 2, 32, DType::BF16, packed.data(), scales.data(), error, "w.weight", 10);
        FAIL() << "expected an error";
    } catch (const InputValueError& e) {
        EXPECT_NE(std::string(e.what()).find("w.weight: row 11, column 5 is nan"), std::string::npos) << e.what();
    }
}

TEST(Nvfp4GlobalScale, TwoRoundingsInTheWeightDtype) {
    // bf16 amax 6: 1/6 -> 0.1669921875 in bf16, * 2688 = 448.875 -> 448 (bf16 steps of 2 there).
    EXPECT_EQ(nvfp4_global_scale(6.0f, DType::BF16), 448.0f);
    EXPECT_EQ(nvfp4_global_scale(1.0f, DType::BF16), 2688.0f);
    EXPECT_EQ(nvfp4_global_scale(3.0f, DType::F32), 896.0f);
    // All zero: amax clamped to bf16's smallest normal 2^-126; 2^126 * 2688 overflows bf16 -> 1.
    EXPECT_EQ(nvfp4_global_scale(0.0f, DType::BF16), 1.0f);
    // F16: 1/0.01 = 100 (in F16: 100), * 2688 = 268800 > 65504 -> infinity -> 1.
    EXPECT_EQ(nvfp4_global_scale(0.01f, DType::F16), 1.0f);
    EXPECT_EQ(nvfp4_global_scale(1.0f, DType::F16), 2688.0f);
}

struct NvRow {
    std::vector<uint8_t> packed = std::vector<uint8_t>(8);
    uint8_t scale = 0;
};
NvRow nvfp4(const std::vector<float>& row, float global) {
    NvRow out;
    QuantError error;
    quantize_nvfp4_rows(row.data(), 1, 16, DType::BF16, global, out.packed.data(), &out.scale, error, "w.weight", 0);
    return out;
}

TEST(Nvfp4, GroupScaleIsE4m3OfGlobalTimesAmaxOverSix) {
    // Global 448 (a tensor amax of 6); group amax 6: s1 = 1, s = e4m3(448) = 0x7E; e = 448/448 = 1.
    std::vector<float> row{6.0f, 0.25f, 0.75f, 2.5f, 3.5f, -5.0f, -0.0f, -0.1f};
    row.resize(16, 0.0f);
    const NvRow q = nvfp4(row, 448.0f);
    EXPECT_EQ(q.scale, 0x7E);
    const std::vector<uint8_t> codes{7, 0, 2, 4, 6, 0xE, 0x0, 0x8};
    for (size_t i = 0; i < codes.size(); ++i) EXPECT_EQ(nibble(q.packed, i), codes[i]) << i;
}

TEST(Nvfp4, SubnormalGroupScale) {
    // Global 448; group amax 2^-13: s1 = round_bf16(2^-13 / 6) = 1.3359375 * 2^-16; 448 * s1 =
    // 0.009132385 = 4.68 steps of 2^-9 -> the e4m3 subnormal 5 * 2^-9 (code 0x05);
    // e = 0.009765625 / 448; 2^-13 / e = 5.6 -> 6 (code 7).
    std::vector<float> row(16, 0.0f);
    row[0] = std::ldexp(1.0f, -13);
    const NvRow q = nvfp4(row, 448.0f);
    EXPECT_EQ(q.scale, 0x05);
    EXPECT_EQ(nibble(q.packed, 0), 7);
}

TEST(Nvfp4, ZeroGroupScaleBecomesAnEighth) {
    const NvRow q = nvfp4(std::vector<float>(16, 0.0f), 448.0f);
    // s = 0 in e4m3 -> compressed-tensors' FP8 eps 0.125 = 2^-3: exponent field 3 + 7 = 4, code 0x20.
    EXPECT_EQ(q.scale, 0x20);
    EXPECT_EQ(e4m3fn_to_float(q.scale), 0.125f);
    for (uint8_t b : q.packed) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace vmerge
