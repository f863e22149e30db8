// Sizes and rates as people read them (core/human_units.h).
#include <gtest/gtest.h>

#include "core/human_units.h"

namespace vmerge {
namespace {

TEST(HumanUnits, RatesAndExactSizes) {
    EXPECT_EQ(human_rate(1e9), "953.7 MiB/s");
    EXPECT_EQ(human_rate(0), "0 B/s");
    EXPECT_EQ(exact_size_flag(16777216), "16MiB");
    EXPECT_EQ(exact_size_flag(1000), "1000B");
    EXPECT_EQ(exact_size_flag(3ull << 30), "3GiB");
}

}  // namespace
}  // namespace vmerge
