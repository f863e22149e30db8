// Unit tests for cast_elements (src/exec/dtype_cast.h): the element casts between the floating
// types, their bulk paths against the scalar conversions of core/dtype.h.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "exec/dtype_cast.h"
#include "core/error.h"

namespace vmerge {
namespace {

float f32(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(CastElements, IntToFloatThrows) {
    int32_t in[2] = {1, 2};
    float out[2] = {};
    EXPECT_THROW(cast_elements(in, DType::I32, out, DType::F32, 2), Error);
}

TEST(CastElements, SameTypeCopiesBytes) {
    const int64_t in[3] = {-1, 0x123456789ABCLL, 7};
    int64_t out[3] = {};
    cast_elements(in, DType::I64, out, DType::I64, 3);
    EXPECT_EQ(std::memcmp(in, out, sizeof in), 0);
    const uint32_t nan_in[2] = {0x7FA12345u, 0xFFC00001u};  // NaN payloads survive a same-type copy
    uint32_t nan_out[2] = {};
    cast_elements(nan_in, DType::F32, nan_out, DType::F32, 2);
    EXPECT_EQ(nan_out[0], 0x7FA12345u);
    EXPECT_EQ(nan_out[1], 0xFFC00001u);
}

TEST(CastElements, F32ToF16AndBf16) {
    const float in[5] = {1.0f, -2.0f, 65520.0f, std::ldexp(1.0f, -24), f32(0x3F818000)};
    uint16_t half[5] = {};
    cast_elements(in, DType::F32, half, DType::F16, 5);
    EXPECT_EQ(half[0], 0x3C00);
    EXPECT_EQ(half[1], 0xC000);
    EXPECT_EQ(half[2], 0x7C00);
    EXPECT_EQ(half[3], 0x0001);
    EXPECT_EQ(half[4], 0x3C0C);  // 1.01171875 = 1 + 12/1024 exactly
    uint16_t bf[5] = {};
    cast_elements(in, DType::F32, bf, DType::BF16, 5);
    EXPECT_EQ(bf[0], 0x3F80);
    EXPECT_EQ(bf[1], 0xC000);
    EXPECT_EQ(bf[2], 0x4780);  // 65520 = 0x477FF000: 0x477F + round up (0xF000 > half)
    EXPECT_EQ(bf[3], 0x3380);  // 2^-24
    EXPECT_EQ(bf[4], 0x3F82);  // tie to even
}

TEST(CastElements, WideningToF32AndF64) {
    const uint16_t half[4] = {0x3C00, 0xC000, 0x0001, 0x7BFF};
    float f[4] = {};
    cast_elements(half, DType::F16, f, DType::F32, 4);
    EXPECT_EQ(f[0], 1.0f);
    EXPECT_EQ(f[1], -2.0f);
    EXPECT_EQ(f[2], std::ldexp(1.0f, -24));
    EXPECT_EQ(f[3], 65504.0f);
    double d[4] = {};
    cast_elements(half, DType::F16, d, DType::F64, 4);
    EXPECT_EQ(d[0], 1.0);
    EXPECT_EQ(d[1], -2.0);
    EXPECT_EQ(d[2], std::ldexp(1.0, -24));
    EXPECT_EQ(d[3], 65504.0);

    const uint16_t bf[3] = {0x3F80, 0xC040, 0x7F80};
    double bd[3] = {};
    cast_elements(bf, DType::BF16, bd, DType::F64, 3);
    EXPECT_EQ(bd[0], 1.0);
    EXPECT_EQ(bd[1], -3.0);
    EXPECT_EQ(bd[2], std::numeric_limits<double>::infinity());

    const float fin[3] = {0.1f, -1e30f, std::ldexp(1.0f, -149)};
    double fd[3] = {};
    cast_elements(fin, DType::F32, fd, DType::F64, 3);
    EXPECT_EQ(fd[0], static_cast<double>(0.1f));
    EXPECT_EQ(fd[1], static_cast<double>(-1e30f));
    EXPECT_EQ(fd[2], std::ldexp(1.0, -149));
}

TEST(CastElements, F64Narrowing) {
    const double in[4] = {1.0, -0.5, 1e300, 3.0};
    float f[4] = {};
    cast_elements(in, DType::F64, f, DType::F32, 4);
    EXPECT_EQ(f[0], 1.0f);
    EXPECT_EQ(f[1], -0.5f);
    EXPECT_EQ(f[2], std::numeric_limits<float>::infinity());
    EXPECT_EQ(f[3], 3.0f);
    uint16_t h[4] = {};
    cast_elements(in, DType::F64, h, DType::F16, 4);
    EXPECT_EQ(h[0], 0x3C00);
    EXPECT_EQ(h[1], 0xB800);
    EXPECT_EQ(h[2], 0x7C00);
    EXPECT_EQ(h[3], 0x4200);
    uint16_t b[4] = {};
    cast_elements(in, DType::F64, b, DType::BF16, 4);
    EXPECT_EQ(b[0], 0x3F80);
    EXPECT_EQ(b[1], 0xBF00);
    EXPECT_EQ(b[2], 0x7F80);
    EXPECT_EQ(b[3], 0x4040);
}

TEST(CastElements, Bf16AndF16BetweenEachOther) {
    const uint16_t bf[3] = {0x3F80, 0xC000, 0x3F81};  // 1, -2, 1.0078125 (1 + 1/128)
    uint16_t h[3] = {};
    cast_elements(bf, DType::BF16, h, DType::F16, 3);
    EXPECT_EQ(h[0], 0x3C00);
    EXPECT_EQ(h[1], 0xC000);
    EXPECT_EQ(h[2], 0x3C08);  // 1 + 8/1024
    const uint16_t half[3] = {0x3C00, 0x3C01, 0x7C00};  // 1, 1 + 2^-10, inf
    uint16_t out[3] = {};
    cast_elements(half, DType::F16, out, DType::BF16, 3);
    EXPECT_EQ(out[0], 0x3F80);
    EXPECT_EQ(out[1], 0x3F80);  // 1 + 2^-10 is below half a bf16 ulp (2^-8) above 1
    EXPECT_EQ(out[2], 0x7F80);
}

TEST(CastElements, ZeroCountWritesNothing) {
    float in[1] = {1.0f};
    uint16_t out[1] = {0xABCD};
    cast_elements(in, DType::F32, out, DType::BF16, 0);
    EXPECT_EQ(out[0], 0xABCD);
}

}  // namespace
}  // namespace vmerge

namespace vmerge {
namespace {

// The bulk fp32 -> bf16 and bf16 -> fp32 loops (cast_elements' fast paths) give what the
// element-by-element conversions, tested above, give: on a stride through every fp32 bit
// pattern, every NaN and infinity boundary, and all 2^16 bf16 values.
TEST(CastElements, BulkPathsMatchTheScalarConversions) {
    std::vector<uint32_t> patterns;
    for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 65521) patterns.push_back(static_cast<uint32_t>(bits));
    for (uint32_t edge : {0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0x7F7F8000u, 0x3F808000u,
                          0x3F818000u, 0x00008000u, 0x00018000u})
        for (uint32_t sign : {0u, 0x80000000u}) patterns.push_back(edge | sign);
    std::vector<uint16_t> bulk(patterns.size());
    cast_elements(patterns.data(), DType::F32, bulk.data(), DType::BF16, patterns.size());
    for (size_t i = 0; i < patterns.size(); ++i)
        ASSERT_EQ(bulk[i], f32_to_bf16(std::bit_cast<float>(patterns[i]))) << std::hex << patterns[i];

    std::vector<uint16_t> all(1 << 16);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> widened(all.size());
    cast_elements(all.data(), DType::BF16, widened.data(), DType::F32, all.size());
    for (size_t i = 0; i < all.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(bf16_to_f32(all[i]))) << i;
}

}  // namespace
}  // namespace vmerge
