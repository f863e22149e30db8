// Unit tests for the HDF5 archive options of mpi/command_line.cpp: --format, --compress,
// --hdf5_chunk_size and --backend hdf5, and what they refuse.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "command_line.h"

namespace vmerge {
namespace {

std::optional<Options> parse(std::vector<std::string> args) {
    args.insert(args.begin(), "vmerge-mpi");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return parse_command_line(static_cast<int>(argv.size()), argv.data(), false);
}

const std::vector<std::string> kMerge = {"merge", "--local_dir", "ckpt", "--target_dir", "out"};

std::vector<std::string> merge_with(std::vector<std::string> extra) {
    auto args = kMerge;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
}

TEST(ArchiveOptions, Defaults) {
    const auto o = parse(kMerge);
    EXPECT_EQ(o->format, "safetensors");
    EXPECT_EQ(o->output.zstd_level, 0);
    EXPECT_EQ(o->output.chunk_bytes, 4ull << 20);
}

TEST(ArchiveOptions, CompressLevels) {
    EXPECT_EQ(parse(merge_with({"--format", "hdf5", "--compress", "zstd"}))->output.zstd_level, 3);
    EXPECT_EQ(parse(merge_with({"--format", "hdf5", "--compress", "zstd:1"}))->output.zstd_level, 1);
    EXPECT_EQ(parse(merge_with({"--format=hdf5", "--compress=zstd:22"}))->output.zstd_level, 22);
    EXPECT_EQ(parse(merge_with({"--format", "hdf5", "--compress", "none"}))->output.zstd_level, 0);
    EXPECT_EQ(parse(merge_with({"--format", "hdf5", "--hdf5-chunk-size", "1MB"}))->output.chunk_bytes, 1000000u);
    for (const char* bad : {"zstd:0", "zstd:23", "zstd:-1", "zstd:3x", "zstd:", "gzip", "zstd3"})
        EXPECT_THROW(parse(merge_with({"--format", "hdf5", "--compress", bad})), UsageError) << bad;
}

TEST(ArchiveOptions, Refusals) {
    EXPECT_THROW(parse(merge_with({"--compress", "zstd"})), UsageError);  // needs --format hdf5
    EXPECT_THROW(parse(merge_with({"--format", "h5"})), UsageError);
    EXPECT_THROW(parse(merge_with({"--format", "hdf5", "--resume"})), UsageError);
    EXPECT_THROW(parse(merge_with({"--format", "hdf5", "--backend", "hdf5"})), UsageError);
    EXPECT_THROW(parse(merge_with({"--format", "hdf5", "--hdf5_chunk_size", "4GiB"})), UsageError);
    EXPECT_THROW(parse(merge_with({"--backend", "hdf5", "--dtype", "bf16"})), UsageError);
    EXPECT_THROW(parse({"test", "--backend", "hdf5", "--local_dir", "a", "--test_hf_dir", "b"}), UsageError);
    EXPECT_NO_THROW(parse(merge_with({"--backend", "hdf5"})));
    EXPECT_NO_THROW(parse({"inspect", "--backend", "hdf5", "--local_dir", "a"}));
}

}  // namespace
}  // namespace vmerge
