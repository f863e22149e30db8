// The option table: one entry per flag, grouped per command, with each name list once.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.h"
#include "mpi/parse_options.h"
#include "formats/registry.h"
#include "test_support.h"

namespace vmerge {
namespace {

std::optional<Options> parse(std::vector<std::string> args, bool print_help = false) {
    args.insert(args.begin(), "vmerge-mpi");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return parse_command_line(static_cast<int>(argv.size()), argv.data(), print_help);
}

std::string usage_error(std::vector<std::string> args) {
    try {
        parse(std::move(args));
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

std::string help_of(const std::string& command) {
    std::ostringstream captured;
    auto* old = std::cout.rdbuf(captured.rdbuf());
    parse({command, "--help"}, true);
    std::cout.rdbuf(old);
    return captured.str();
}

TEST(CommandLine, FlagsFillTheStagesOptions) {
    const auto o = parse({"merge", "--local-dir", "/in", "--target_dir", "/out", "--merge-lora", "--lora_alpha", "16",
                          "--tp-size", "2", "--dtype", "bfloat16", "--quantize", "--bits", "8", "--quantize_ignore",
                          "a,,re:b.*", "--max_memory", "1GiB", "--low_cpu_mem_usage"});
    ASSERT_TRUE(o);
    EXPECT_TRUE(o->merge_lora());
    EXPECT_EQ(o->lora.alpha, 16.0);
    EXPECT_EQ(o->map.tp_size, 2);
    EXPECT_FALSE(o->map.pp_size);
    EXPECT_EQ(o->dtype, "bfloat16");
    EXPECT_EQ(o->quantize_spec.bits, 8);
    EXPECT_EQ(o->quantize_spec.ignore, (std::vector<std::string>{"a", "re:b.*"}));
    EXPECT_EQ(o->max_memory, 1ull << 30);
    EXPECT_TRUE(o->low_cpu_mem_usage);
}

TEST(CommandLine, NameListsGiveTheirOwnMessages) {
    // --dtype names come from parse_dtype_choice, the one list the output rules use.
    EXPECT_EQ(usage_error({"merge", "--local_dir", "a", "--target_dir", "b", "--dtype", "int8"}),
              "--dtype int8: expected auto, keep, bf16, fp16 or fp32");
    EXPECT_EQ(usage_error({"merge", "--local_dir", "a", "--target_dir", "b", "--backend", "zip"}),
              "--backend zip: expected auto, fsdp, megatron, torchtitan, dcp, deepspeed or hdf5");
    EXPECT_EQ(usage_error({"merge", "--local_dir", "a", "--target_dir", "b", "--format", "gguf"}),
              "--format gguf: expected safetensors or hdf5");
    EXPECT_EQ(usage_error({"frobnicate"}), "unknown command 'frobnicate' (merge, test, inspect, verify, watch or map)");
    EXPECT_EQ(usage_error({"merge", "--local_dir", "a"}), "merge needs --target_dir");
    EXPECT_EQ(usage_error({"merge", "--local_dir", "a", "--target_dir", "b", "--symmetric", "--asymmetric"}),
              "--symmetric and --asymmetric exclude each other");
}

TEST(CommandLine, HelpShowsTheGroupsOfOneCommand) {
    const std::string merge = help_of("merge");
    for (const char* flag : {"--backend", "--format", "--quantize", "--merge_lora", "--max_memory"})
        EXPECT_NE(merge.find(flag), std::string::npos) << flag;
    // Option lines start "  --name"; the usage lines above them mention some flags in prose.
    EXPECT_EQ(merge.find("  --test_hf_dir"), std::string::npos);
    EXPECT_EQ(merge.find("  --simulate"), std::string::npos);
    const std::string inspect = help_of("inspect");
    EXPECT_NE(inspect.find("  --simulate"), std::string::npos);
    EXPECT_EQ(inspect.find("  --target_dir"), std::string::npos);
    EXPECT_NE(help_of("verify").find("verify: --target_dir DIR"), std::string::npos);
    EXPECT_FALSE(parse({"merge", "--help"}));
}

// DeepSpeed users' habit: zero_to_fp32.py CHECKPOINT_DIR OUTPUT_DIR [-t TAG] [--exclude_frozen_parameters]
// [--safe_serialization]; each flag keeps its meaning.
TEST(CommandLine, ZeroToFp32FormTakesFoldersByPosition) {
    const auto o = parse({"merge", "ckpt", "out", "-t", "global_step7", "--exclude_frozen_parameters", "--safe_serialization"});
    ASSERT_TRUE(o);
    EXPECT_EQ(o->local_dir, "ckpt");
    EXPECT_EQ(o->output.target, "out");
    EXPECT_EQ(o->backend_flags.text("tag"), "global_step7");
    EXPECT_TRUE(o->backend_flags.given("exclude_frozen_parameters"));
    EXPECT_EQ(usage_error({"merge", "ckpt"}), "merge CHECKPOINT_DIR OUTPUT_DIR: expected two folders by position, got 1 ('ckpt')");
    EXPECT_EQ(usage_error({"merge", "a", "b", "c"}),
              "merge CHECKPOINT_DIR OUTPUT_DIR: expected two folders by position, got 3 ('c')");
    EXPECT_EQ(usage_error({"merge", "a", "b", "--local_dir", "a"}),
              "merge a b: the folders are given by position and as --local_dir/--target_dir; give them once");
    EXPECT_EQ(usage_error({"inspect", "a", "--local_dir", "a"}),
              "unexpected argument 'a': only merge takes its folders by position (merge CHECKPOINT_DIR OUTPUT_DIR, as zero_to_fp32.py)");
}

TEST(CommandLine, FreeSpaceCheckIsOnUnlessSkipped) {
    EXPECT_TRUE(parse({"merge", "--local_dir", "a", "--target_dir", "b"})->output.check_free_space);
    EXPECT_FALSE(parse({"merge", "--local_dir", "a", "--target_dir", "b", "--skip_free_space_check"})->output.check_free_space);
}

using testing::error_of;

TEST(BackendRegistry, CommandLineTakesTheRegistryValues) {
    for (const auto& value : backend_values()) {
        if (value == "hdf5") continue;  // an archive: merge and inspect only, tested below
        EXPECT_EQ(parse({"merge", "--local_dir", "c", "--target_dir", "o", "--backend", value})->backend, value);
    }
    EXPECT_EQ(error_of([] { parse({"merge", "--local_dir", "c", "--target_dir", "o", "--backend", "torch_dist"}); }),
              "--backend torch_dist: expected auto, fsdp, megatron, torchtitan, dcp, deepspeed or hdf5");
#ifndef VMERGE_NO_MPI  // a build without MPI refuses the archive (test_build_without_mpi.cpp)
    EXPECT_EQ(parse({"inspect", "--local_dir", "c", "--backend", "hdf5"})->backend, "hdf5");
    EXPECT_EQ(error_of([] { parse({"test", "--local_dir", "c", "--test_hf_dir", "r", "--backend", "hdf5"}); }),
              "--backend hdf5 works with merge (archive -> Hugging Face folder) and inspect");
#endif
}

// The options of a parse without --help, for the command-line tests of the end-to-end and bounds tests.
namespace plain_options {

using testing::parse_options;

Options parse(std::vector<std::string> args) { return parse_options(std::move(args)); }

TEST(CommandLine, DashesAndUnderscoresBothWork) {
    const Options a = parse({"merge", "--local-dir", "/in", "--target-dir", "/out", "--max-shard-size", "2GiB"});
    EXPECT_EQ(a.command, "merge");
    EXPECT_EQ(a.local_dir, "/in");
    EXPECT_EQ(a.output.target, "/out");
    EXPECT_EQ(a.output.max_shard_size, 1ull << 31);
    const Options b = parse({"merge", "--local_dir", "/in", "--target_dir", "/out"});
    EXPECT_EQ(b.local_dir, "/in");
    EXPECT_EQ(b.output.target, "/out");
    EXPECT_EQ(b.output.max_shard_size, 5'000'000'000ull);
    EXPECT_TRUE(b.hf_config.empty());  // decided by detection: <local_dir>/huggingface or hf_config_and_tokenizer
    const Options c = parse({"merge", "--local-dir=/x", "--target_dir=/y", "--force"});
    EXPECT_EQ(c.local_dir, "/x");
    EXPECT_EQ(c.output.target, "/y");
    EXPECT_TRUE(c.output.force);
}

TEST(CommandLine, UnknownCommandOrMissingArgumentsAreUsageErrors) {
    EXPECT_THROW(parse({"frobnicate", "--local_dir", "/in", "--target_dir", "/out"}), UsageError);
    EXPECT_THROW(parse({}), UsageError);
    EXPECT_THROW(parse({"merge", "--target_dir", "/out"}), UsageError);
    EXPECT_THROW(parse({"merge", "--local_dir", "/in"}), UsageError);
    EXPECT_THROW(parse({"test", "--local_dir", "/in"}), UsageError);
    EXPECT_THROW(parse({"merge", "--local_dir", "/in", "--target_dir", "/out", "--no_such_option", "1"}), UsageError);
    EXPECT_THROW(parse({"merge", "--local_dir", "/in", "--target_dir", "/out", "--backend", "xyz"}), UsageError);
}

TEST(CommandLine, MapTakesTheBaseAndTheTableFile) {
    const Options o = parse({"map", "--local_dir", "/in", "--base", "/base", "--out", "t.json"});
    EXPECT_EQ(o.command, "map");
    EXPECT_EQ(o.map_base, "/base");
    EXPECT_EQ(o.map_out, "t.json");
    EXPECT_THROW(parse({"map", "--local_dir", "/in"}), UsageError);                                   // no --base
    EXPECT_THROW(parse({"map", "--base", "/base"}), UsageError);                                       // no --local_dir
    EXPECT_THROW(parse({"merge", "--local_dir", "/in", "--target_dir", "/out", "--base", "/b"}), UsageError);  // map's flag
}

TEST(CommandLine, ParseByteSize) {
    EXPECT_EQ(parse_byte_size("5GB"), 5'000'000'000ull);
    EXPECT_EQ(parse_byte_size("2GiB"), 1ull << 31);
    EXPECT_EQ(parse_byte_size("500MB"), 500'000'000ull);
    EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
    EXPECT_EQ(parse_byte_size("1024"), 1024ull);
    EXPECT_EQ(parse_byte_size("3kb"), 3000ull);
    EXPECT_THROW(parse_byte_size("5XB"), UsageError);
    EXPECT_THROW(parse_byte_size("GB"), UsageError);
    EXPECT_THROW(parse_byte_size("0"), UsageError);
    EXPECT_THROW(parse_byte_size("-5GB"), UsageError);
}

using testing::error_of;

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

}  // namespace plain_options

}  // namespace
}  // namespace vmerge
