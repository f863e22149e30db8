// require_input_folder (io/input_folder.h): folders the user named.
#include <gtest/gtest.h>

#include <string>

#include "io/input_folder.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::TempDir;
using testing::error_of;

TEST(InputFolder, TypoAndFileAreToldApart) {
    TempDir dir;
    dir.touch("file");
    EXPECT_EQ(error_of([&] { require_input_folder(dir.path() + "/nope", "--local_dir"); }),
              dir.path() + "/nope: does not exist (--local_dir)");
    EXPECT_EQ(error_of([&] { require_input_folder(dir.path() + "/file", "--local_dir"); }),
              dir.path() + "/file: is a file, not a folder (--local_dir)");
    EXPECT_EQ(error_of([&] { require_input_folder(dir.path(), "--local_dir"); }), "");
}

}  // namespace
}  // namespace vmerge
