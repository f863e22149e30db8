// require_writable_output_file (io/output_path_check.h): an output file's folder must exist and
// the name must take a regular file.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/output_path_check.h"
#include "test_support.h"

namespace vmerge {
namespace {

using vmerge::testing::TempDir;

using testing::error_of;
TEST(OutputPathCheck, LogJsonFolderMustExistAndTakeAFile) {
    TempDir dir;
    EXPECT_NO_THROW(require_writable_output_file(dir.path() + "/log.json", "--log_json"));
    EXPECT_EQ(error_of([] { require_writable_output_file("/nonexistent/dir/x.json", "--log_json"); }),
              "--log_json /nonexistent/dir/x.json: its folder /nonexistent/dir cannot be used: No such file or directory");
    dir.touch("file");
    EXPECT_EQ(error_of([&] { require_writable_output_file(dir.path() + "/file/x.json", "--log_json"); }),
              "--log_json " + dir.path() + "/file/x.json: " + dir.path() + "/file is not a folder");
    std::filesystem::create_directory(dir.path() + "/sub");
    EXPECT_EQ(error_of([&] { require_writable_output_file(dir.path() + "/sub", "--log_json"); }),
              "--log_json " + dir.path() + "/sub: a directory, not a regular file");
    const std::string fifo = dir.path() + "/fifo.json";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_EQ(error_of([&] { require_writable_output_file(fifo, "--log_json"); }),
              "--log_json " + fifo + ": a FIFO, not a regular file");
}

}  // namespace
}  // namespace vmerge
