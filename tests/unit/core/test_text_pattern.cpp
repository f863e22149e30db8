// The one linear-time matcher (core/text_pattern.h) for text and names that come from input files.
#include <gtest/gtest.h>

#include <string>

#include "core/text_pattern.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::contains;
using testing::error_of;

TEST(TextPattern, FullMatchGivesGroupsAndEmptyForUnusedOnes) {
    const TextPattern p(R"(mp_rank_(\d+)(?:_(\d+))?)");
    TextMatch m;
    ASSERT_TRUE(p.full_match("mp_rank_03", m));
    EXPECT_EQ(m[0], "mp_rank_03");
    EXPECT_EQ(m[1], "03");
    EXPECT_EQ(m[2], "");
    EXPECT_FALSE(p.full_match("xmp_rank_03"));
    EXPECT_TRUE(TextPattern(R"(\.\d+\.)").partial_match("layers.3.mlp"));
    EXPECT_EQ(TextPattern(R"(\.\d+\.)").replace_all("a.0.b.12.c", ".*."), "a.*.b.*.c");
}

TEST(TextPattern, BacktrackingPatternsFromFilesFinish) {
    // std::regex takes exponential time on this pattern (an adapter_config.json rank_pattern
    // key); RE2 is linear in the text.
    const TextPattern hostile("(.*\\.)?((.|.|.|.)*Z)");
    EXPECT_FALSE(hostile.full_match(std::string(5000, 'a')));
    EXPECT_TRUE(hostile.full_match(std::string(5000, 'a') + "Z"));
}

TEST(TextPattern, InvalidPatternNamesWhereItCameFrom) {
    const std::string e = error_of([] { TextPattern("(", "adapter_config.json: rank_pattern key"); });
    EXPECT_TRUE(contains(e, "adapter_config.json: rank_pattern key: '(' is not a valid regular expression")) << e;
}

}  // namespace
}  // namespace vmerge
