// The rules every reader shares for text and names that come from input files: one linear-time
// matcher (TextPattern), one containment rule (path_inside), folders the user named.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/human_units.h"
#include "core/text_pattern.h"
#include "io/contained_path.h"
#include "io/input_folder.h"
#include "architecture/architecture_table.h"
#include "architecture/builtin_tables.h"
#include "test_support.h"

namespace vmerge {
namespace {
using testing::TempDir;
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

TEST(InputFolder, TypoAndFileAreToldApart) {
    TempDir dir;
    dir.touch("file");
    EXPECT_EQ(error_of([&] { require_input_folder(dir.path() + "/nope", "--local_dir"); }),
              dir.path() + "/nope: does not exist (--local_dir)");
    EXPECT_EQ(error_of([&] { require_input_folder(dir.path() + "/file", "--local_dir"); }),
              dir.path() + "/file: is a file, not a folder (--local_dir)");
    EXPECT_EQ(error_of([&] { require_input_folder(dir.path(), "--local_dir"); }), "");
}

TEST(HumanUnits, RatesAndExactSizes) {
    EXPECT_EQ(human_rate(1e9), "953.7 MiB/s");
    EXPECT_EQ(human_rate(0), "0 B/s");
    EXPECT_EQ(exact_size_flag(16777216), "16MiB");
    EXPECT_EQ(exact_size_flag(1000), "1000B");
    EXPECT_EQ(exact_size_flag(3ull << 30), "3GiB");
}

TEST(ArchitectureTables, BuiltIntoTheBinary) {
    // A copied vmerge-mpi (no share/ beside it) still has every shipped table.
    const auto& tables = builtin_architecture_tables();
    ASSERT_GE(tables.size(), 10u);
    for (const auto& t : tables) {
        const ArchitectureTable table = read_architecture_table(std::string("builtin:") + t.name);
        EXPECT_FALSE(table.architectures.empty()) << t.name;
    }
    EXPECT_FALSE(error_of([] { read_architecture_table("builtin:none.json"); }).empty());
}

}  // namespace
}  // namespace vmerge
