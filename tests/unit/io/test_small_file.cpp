// Small files as rank 0 hands them on (io/small_file.h): a round trip keeps text, absence and error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "io/small_file.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::error_of;
TEST(SharedFiles, SmallFilesRoundTrip) {
    std::vector<SmallFile> files(3);
    files[0] = {"/a", true, std::string("x\0:y", 4), ""};
    files[1] = {"/b", false, "", ""};
    files[2] = {"/c", true, "", "/c: not a regular file"};
    const auto back = deserialize_small_files(serialize_small_files(files));
    ASSERT_EQ(back.size(), 3u);
    EXPECT_EQ(back[0].text, files[0].text);
    EXPECT_TRUE(back[0].exists);
    EXPECT_FALSE(back[1].exists);
    EXPECT_EQ(error_of([&] { back[2].contents(); }), "/c: not a regular file");
    EXPECT_THROW(deserialize_small_files("9:abc"), Error);
    EXPECT_THROW(deserialize_small_files("x:abc"), Error);
}

}  // namespace
}  // namespace vmerge
