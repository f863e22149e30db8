// The checked parsers, accessors and opener that keep every input number bounded and every
// input a regular file (no FIFO or device to hang on).
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "test_support.h"
#include "core/bounded_number.h"
#include "torch/dtensor_placement.h"
#include "core/error.h"
#include "architecture/hf_config.h"
#include "io/input_file.h"
#include "io/json_file.h"
#include "io/output_path_check.h"

namespace vmerge {
namespace {

using vmerge::testing::TempDir;

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

TEST(JsonIntWithin, RefusesFractionsStringsAndWrappingUnsigned) {
    EXPECT_EQ(json_int_within(nlohmann::json(7), 1, 8, "k"), 7);
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json::parse("18446744073709551615"), 1, 8, "k"); }),
              "k 18446744073709551615: expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json(4.5), 1, 8, "k"); }), "k 4.5: expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json("4"), 1, 8, "k"); }), "k \"4\": expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json(true), 1, 8, "k"); }), "k true: expected a whole number 1..8");
    EXPECT_EQ(error_of([] { json_int_within(nlohmann::json(9), 1, 8, "k"); }), "k 9: expected 1..8");
}

HfConfig config_with(nlohmann::json json) {
    HfConfig c;
    c.dir = "/m";
    c.json = std::move(json);
    return c;
}

TEST(ConfigInt, BoundsEveryKeyAndNamesFileKeyAndValue) {
    const HfConfig c = config_with({{"num_hidden_layers", 1000000000}, {"vocab_size", 0}, {"hidden_size", 4096}});
    EXPECT_EQ(config_int(c, "hidden_size"), 4096);
    EXPECT_EQ(error_of([&] { config_int(c, "num_hidden_layers"); }),
              "/m/config.json: num_hidden_layers 1000000000: expected 1..100000");
    EXPECT_EQ(error_of([&] { config_int(c, "vocab_size"); }), "/m/config.json: vocab_size 0: expected 1..2147483648");
    EXPECT_EQ(config_int(c, "decoder_sparse_step", 1), 1);  // missing: the fallback
    EXPECT_EQ(error_of([&] { config_int(c, "intermediate_size"); }), "/m/config.json: missing 'intermediate_size'");
    EXPECT_THROW(config_int(c, "no_such_key_has_bounds"), std::logic_error);
    const HfConfig zero_step = config_with({{"decoder_sparse_step", 0}});
    EXPECT_EQ(error_of([&] { config_int(zero_step, "decoder_sparse_step", 1); }),
              "/m/config.json: decoder_sparse_step 0: expected 1..100000");
}

TEST(ConfigInt, EveryBoundKeepsShapeProductsIn64Bits) {
    // Two sizes multiply into a shape's element count: it must not overflow int64.
    const int64_t vocab = config_int_bounds("vocab_size").second, hidden = config_int_bounds("hidden_size").second;
    EXPECT_LT(static_cast<double>(vocab) * static_cast<double>(hidden), 9.2e18);
    EXPECT_GE(config_int_bounds("num_hidden_layers").first, 1);
    EXPECT_GE(config_int_bounds("decoder_sparse_step").first, 1);  // a divisor
    EXPECT_GE(config_int_bounds("moe_layer_freq").first, 1);        // a divisor
}

TEST(InputFileOpener, RefusesAFifoWithoutWaitingForAWriter) {
    TempDir dir;
    const std::string fifo = dir.path() + "/config.json";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    // A blocking open() would wait here forever: the test would time out, not pass.
    EXPECT_EQ(error_of([&] { InputFile file(fifo); }),
              fifo + ": a FIFO, not a regular file (vmerge reads only regular files)");
    EXPECT_EQ(error_of([&] { read_json_file(fifo); }),
              fifo + ": a FIFO, not a regular file (vmerge reads only regular files)");
    EXPECT_EQ(error_of([&] { require_regular_file(fifo); }),
              fifo + ": a FIFO, not a regular file (vmerge reads only regular files)");
    EXPECT_EQ(error_of([&] { require_regular_file(dir.path()); }),
              dir.path() + ": a directory, not a regular file (vmerge reads only regular files)");
}

TEST(InputFileOpener, RefusesACharacterDeviceWhereAllowed) {
    TempDir dir;
    const std::string device = dir.path() + "/rank.pt";
    if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 5)) != 0) GTEST_SKIP() << "mknod needs root";
    EXPECT_EQ(error_of([&] { InputFile file(device); }),
              device + ": a character device, not a regular file (vmerge reads only regular files)");
}

TEST(InputFileOpener, RegularFilesReadAsBeforeAndSmallFilesAreBounded) {
    TempDir dir;
    dir.touch("t.txt", "1000\n");
    const std::string path = dir.path() + "/t.txt";
    EXPECT_EQ(read_small_file(path, 5, "a tracker"), "1000\n");
    EXPECT_EQ(error_of([&] { read_small_file(path, 4, "a tracker"); }),
              path + ": 5 bytes, more than the 4 bytes a tracker may hold");
    InputFile file(path);
    char c = 0;
    file.read_exact(1, &c, 1);  // O_NONBLOCK leaves a regular file's reads as they were
    EXPECT_EQ(c, '0');
}

DTensorLayout strided_layout(Shape mesh, int64_t split_factor) {
    DTensorLayout l;
    l.global_shape = {8};
    l.mesh_shape = mesh;
    l.coordinates = Shape(mesh.size(), 0);
    l.placements = {vmerge::testing::strided(0, split_factor)};
    while (l.placements.size() < mesh.size()) l.placements.push_back(vmerge::testing::shard(0));
    return l;
}

TEST(DTensorLayoutBounds, SplitFactorAndMeshBounded) {
    EXPECT_NO_THROW(check_dtensor_layout(strided_layout({2, 2}, 2), "w"));
    EXPECT_EQ(error_of([] { check_dtensor_layout(strided_layout({2, 2}, 1000000000000), "w"); }),
              "w: placement _StridedShard(dim=0): split factor 1000000000000: expected 1..1048576");
    EXPECT_EQ(error_of([] { dtensor_runs(strided_layout({2, 2}, 1000000000000), "w"); }),
              "w: placement _StridedShard(dim=0): split factor 1000000000000: expected 1..1048576");
    EXPECT_FALSE(error_of([] { check_dtensor_layout(strided_layout({2, 2}, 0), "w"); }).empty());
    EXPECT_FALSE(error_of([] { check_dtensor_layout(strided_layout({1 << 11, 1 << 10}, 2), "w"); }).empty());
    EXPECT_FALSE(error_of([] { check_dtensor_layout(strided_layout({0}, 1), "w"); }).empty());
}

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "vmerge-mpi");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return *parse_command_line(static_cast<int>(argv.size()), argv.data(), false);
}

TEST(CommandLineBounds, SlurmUnitsAreBinary) {
    EXPECT_EQ(parse_byte_size("128M"), 128ull << 20);
    EXPECT_EQ(parse_byte_size("4K"), 4096ull);
    EXPECT_EQ(parse_byte_size("2g"), 2ull << 30);
    EXPECT_EQ(parse_byte_size("1T"), 1ull << 40);
    EXPECT_EQ(parse_byte_size("1.5KiB"), 1536ull);
    EXPECT_EQ(parse_byte_size("1e3"), 1000ull);
    EXPECT_EQ(parse_byte_size("1.1GB"), 1'100'000'000ull);
    EXPECT_EQ(parse_byte_size("0.3KB"), 300ull);
    EXPECT_EQ(parse({"inspect", "--local_dir", "/in", "--max_memory", "128M"}).max_memory, 128ull << 20);
}

TEST(CommandLineBounds, SizesRefuseNanInfNegativeZeroAndHuge) {
    for (const char* text : {"nan", "inf", "-1", "0", "0.1", "1e30", "0x10", "", "5E"})
        EXPECT_THROW(parse_byte_size(text, "--max_memory"), UsageError) << text;
    EXPECT_EQ(error_of([] { parse_byte_size("nan", "--max_memory"); }),
              "--max_memory nan: expected a positive size: a number and an optional unit (5GB, 512MiB, 128M)");
    EXPECT_EQ(error_of([] { parse_byte_size("2KiB", "--hdf5_chunk_size", 1024); }),
              "--hdf5_chunk_size 2KiB: more than 1024 bytes");
}

TEST(CommandLineBounds, EveryNumericFlagBounded) {
    const std::vector<std::string> merge{"merge", "--local_dir", "/in", "--target_dir", "/out"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = merge;
        args.insert(args.end(), extra.begin(), extra.end());
        return error_of([&] { parse(args); });
    };
    EXPECT_EQ(error_of([] { parse({"inspect", "--local_dir", "/in", "--np", "100000000"}); }),
              "--np 100000000: expected 0..1048576");
    EXPECT_EQ(with({"--tp_size", "0"}), "--tp_size 0: expected 1..1048576");
    EXPECT_EQ(with({"--pp_size", "2000000"}), "--pp_size 2000000: expected 1..1048576");
    EXPECT_EQ(with({"--iteration", "-1"}), "--iteration -1: expected 0..999999999");
    EXPECT_EQ(with({"--progress", "-2"}), "--progress -2: expected -1..86400");
    EXPECT_EQ(with({"--group_size", "-1"}), "--group_size -1: expected 0..16777216");
    EXPECT_EQ(error_of([] { parse({"test", "--local_dir", "/in", "--test_hf_dir", "/ref", "--atol", "nan"}); }),
              "--atol nan: expected a finite number >= 0");
    EXPECT_EQ(error_of([] { parse({"test", "--local_dir", "/in", "--test_hf_dir", "/ref", "--rtol", "-1"}); }),
              "--rtol -1: expected a finite number >= 0");
    // A flag the command does not take is refused, never ignored.
    EXPECT_EQ(with({"--atol", "1"}), "--atol applies to test, not merge");
    EXPECT_EQ(with({"--np", "4"}), "--np applies to inspect, not merge");
    EXPECT_EQ(with({"--max_shard_size", "0"}), "--max_shard_size 0: expected a positive size (at least 1 byte)");
    EXPECT_FALSE(with({"--lora_alpha", "inf"}).empty());
    EXPECT_EQ(with({"--tp_size", "8", "--iteration", "1000", "--progress", "0"}), "");
}

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
