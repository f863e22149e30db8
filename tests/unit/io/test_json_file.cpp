// The bounded accessor of io/json_file.h: a JSON number read as a whole number within bounds.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/json_file.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::error_of;
TEST(JsonIntWithin, RefusesFractionsStringsAndWrappingUnsigned) {
    EXPECT_EQ(json_int_within(nlohmann::json(7), 1, 8, "k"), 7);
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json::parse("18446744073709551615"), 1, 8, "k"); }),
              "k 18446744073709551615: expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json(4.5), 1, 8, "k"); }), "k 4.5: expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json("4"), 1, 8, "k"); }), "k \"4\": expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json(true), 1, 8, "k"); }), "k true: expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json(9), 1, 8, "k"); }), "k 9: expected 1..8");
}

}  // namespace
}  // namespace vmerge
