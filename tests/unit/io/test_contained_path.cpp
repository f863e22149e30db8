// The one containment rule (path_inside, io/contained_path.h) for names that come from input files.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "io/contained_path.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::TempDir;
using testing::contains;
using testing::error_of;

TEST(ContainedPath, PlainRelativeNamesOnly) {
    TempDir dir;
    EXPECT_EQ(path_inside(dir.path(), "model-00001.safetensors", "index"), dir.path() + "/model-00001.safetensors");
    for (const char* bad : {"../secret/model.safetensors", "/etc/passwd", "a/../../b", "", "./x"}) {
        const std::string e = error_of([&] { path_inside(dir.path(), bad, "index weight_map"); });
        EXPECT_TRUE(contains(e, "index weight_map: '")) << bad << ": " << e;
        EXPECT_TRUE(contains(e, "expected a file inside " + dir.path())) << bad << ": " << e;
    }
    EXPECT_FALSE(error_of([&] { path_inside(dir.path(), std::string("a\0b", 3), "list"); }).empty());
}

TEST(ContainedPath, LinksThatLeaveTheFolderAreRefused) {
    TempDir dir, outside;
    outside.touch("secret.safetensors");
    std::filesystem::create_symlink(outside.path() + "/secret.safetensors", dir.path() + "/model.safetensors");
    std::filesystem::create_directory(dir.path() + "/sub");
    dir.touch("sub/inside.json");
    std::filesystem::create_symlink(dir.path() + "/sub/inside.json", dir.path() + "/link.json");
    EXPECT_TRUE(contains(error_of([&] { path_inside(dir.path(), "model.safetensors", "index"); }), "a link that leads to"));
    EXPECT_EQ(path_inside(dir.path(), "link.json", "list"), dir.path() + "/link.json");  // stays inside
    EXPECT_EQ(path_inside(dir.path(), "sub/inside.json", "list"), dir.path() + "/sub/inside.json");
}

}  // namespace
}  // namespace vmerge
