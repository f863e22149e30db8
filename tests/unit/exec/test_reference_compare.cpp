// test's cast comparison (exec/reference_compare.h): the narrower dtype, round to nearest even.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "exec/reference_compare.h"

namespace vmerge {
namespace {

TEST(ReferenceCompare, NarrowerDtypeAndRoundToNearestEven) {
    EXPECT_EQ(comparison_dtype(DType::F32, DType::BF16), DType::BF16);
    EXPECT_EQ(comparison_dtype(DType::BF16, DType::F32), DType::BF16);
    EXPECT_EQ(comparison_dtype(DType::F16, DType::BF16), DType::F16);
    EXPECT_EQ(comparison_dtype(DType::I64, DType::I64), DType::I64);
    EXPECT_FALSE(comparison_dtype(DType::I64, DType::F32));
    // fp32 1.0, 1 + 2^-8 (a tie: to even 0x3F80), 1 + 3·2^-8 (a tie: to even 0x3F82) and bf16 by hand.
    const uint32_t merged[3] = {0x3F800000u, 0x3F808000u, 0x3F818000u};
    const uint16_t reference[3] = {0x3F80, 0x3F80, 0x3F82};
    CastComparison compare;
    size_t bad = 99;
    EXPECT_TRUE(compare.match(reinterpret_cast<const unsigned char*>(merged), DType::F32,
                              reinterpret_cast<const unsigned char*>(reference), DType::BF16, DType::BF16, 3, 0, 0, &bad));
    const uint16_t off[3] = {0x3F80, 0x3F81, 0x3F82};
    EXPECT_FALSE(compare.match(reinterpret_cast<const unsigned char*>(merged), DType::F32,
                               reinterpret_cast<const unsigned char*>(off), DType::BF16, DType::BF16, 3, 0, 0, &bad));
    EXPECT_EQ(bad, 1u);
}

}  // namespace
}  // namespace vmerge
