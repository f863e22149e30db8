// The checked parsers of core/bounded_number.h that keep every input number bounded.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/bounded_number.h"
#include "core/error.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::error_of;
TEST(BoundedNumber, AcceptsPlainDecimalsWithinBounds) {
    EXPECT_EQ(parse_int_within("0", 0, 10), 0);
    EXPECT_EQ(parse_int_within("10", 0, 10), 10);
    EXPECT_EQ(parse_int_within("007", 0, 10), 7);
    EXPECT_EQ(parse_int_within("-5", -10, 10), -5);
    EXPECT_EQ(parse_int_within("9223372036854775807", 0, INT64_MAX), INT64_MAX);
}

TEST(BoundedNumber, RefusesEverythingElse) {
    for (const char* text : {"", "-", "+5", " 5", "5 ", "10abc", "0x10", "1e3", "5.0", "١"})
        EXPECT_FALSE(parse_int_within(text, -100, 100)) << text;
    EXPECT_FALSE(parse_int_within("11", 0, 10));
    EXPECT_FALSE(parse_int_within("-1", 0, 10));  // no sign at all when the bound is not negative
    EXPECT_FALSE(parse_int_within("-11", -10, 10));
    EXPECT_FALSE(parse_int_within("9223372036854775808", 0, INT64_MAX));  // 2^63: beyond 64 bits
    EXPECT_FALSE(parse_int_within("100000000000000000000000000000", 0, INT64_MAX));
}

TEST(BoundedNumber, MessagesNameSourceTextAndBounds) {
    EXPECT_EQ(error_of([] { parse_bounded_int("10abc", 0, 99, "f.txt: tracker"); }),
              "f.txt: tracker '10abc': expected a whole number 0..99");
    EXPECT_EQ(error_of([] { require_within(-5, 1, 8, "cfg: vocab_size"); }), "cfg: vocab_size -5: expected 1..8");
    EXPECT_EQ(require_within(8, 1, 8, "x"), 8);
    const std::string long_text(100, '7');
    const std::string message = error_of([&] { parse_bounded_int(long_text, 0, 9, "s"); });
    EXPECT_EQ(message, "s '" + std::string(40, '7') + "...': expected a whole number 0..9");
}

TEST(BoundedNumber, Hex64) {
    EXPECT_EQ(parse_hex64("00000000000000ff"), 255u);
    EXPECT_EQ(parse_hex64("FFFFFFFFFFFFFFFF"), UINT64_MAX);
    EXPECT_FALSE(parse_hex64("ff"));
    EXPECT_FALSE(parse_hex64("0x000000000000ff"));
    EXPECT_FALSE(parse_hex64("000000000000000g"));
}

}  // namespace
}  // namespace vmerge
