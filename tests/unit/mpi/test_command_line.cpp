// The option table: one entry per flag, grouped per command, with each name list once.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "command_line.h"

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
    EXPECT_EQ(usage_error({"frobnicate"}), "unknown command 'frobnicate' (merge, test, inspect, verify or watch)");
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

}  // namespace
}  // namespace vmerge
