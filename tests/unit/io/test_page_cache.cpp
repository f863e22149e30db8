// choose_page_cache (io/page_cache.h): keep what fits in memory, evict what does not.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/page_cache.h"

namespace vmerge {
namespace {

TEST(PageCache, KeepsWhatFitsAndEvictsWhatDoesNot) {
    EXPECT_EQ(choose_page_cache("auto", 1 << 20, 1ull << 30).policy, PageCachePolicy::Keep);
    EXPECT_EQ(choose_page_cache("auto", 2ull << 30, 1ull << 30).policy, PageCachePolicy::Evict);
    EXPECT_EQ(choose_page_cache("auto", 2ull << 30, 0).policy, PageCachePolicy::Keep);  // unknown: keep
    EXPECT_EQ(choose_page_cache("keep", 2ull << 30, 1ull << 30).policy, PageCachePolicy::Keep);
    EXPECT_EQ(choose_page_cache("evict", 1, 1ull << 30).policy, PageCachePolicy::Evict);
    EXPECT_NE(choose_page_cache("auto", 2ull << 30, 1ull << 30).reason.find("does not fit"), std::string::npos);
    EXPECT_THROW(choose_page_cache("sometimes", 1, 1), Error);
    EXPECT_GT(available_memory_bytes(), 0u);  // /proc/meminfo on Linux
}

}  // namespace
}  // namespace vmerge
