// --quantize[=SCHEME]: alone it is the int scheme; fp8 schemes with `=` or as the next word;
// the int scheme's flags are refused with an FP8 scheme.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "command_line.h"
#include "core/error.h"

namespace vmerge {
namespace {

std::optional<Options> parse_merge(std::vector<std::string> extra) {
    std::vector<std::string> args{"vmerge-mpi", "merge", "--local_dir", "a", "--target_dir", "b"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return parse_command_line(static_cast<int>(argv.size()), argv.data(), false);
}

std::string usage_error(std::vector<std::string> extra) {
    try {
        parse_merge(std::move(extra));
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

TEST(QuantizeSchemeFlags, AloneIsTheIntScheme) {
    const auto o = parse_merge({"--quantize", "--bits", "8"});
    ASSERT_TRUE(o);
    EXPECT_TRUE(o->quantize);
    EXPECT_EQ(o->quantize_spec.scheme, QuantScheme::Int);
    EXPECT_EQ(o->quantize_spec.bits, 8);
    const auto last = parse_merge({"--quantize"});
    ASSERT_TRUE(last);
    EXPECT_EQ(last->quantize_spec.scheme, QuantScheme::Int);
    EXPECT_FALSE(parse_merge({})->quantize);
}

TEST(QuantizeSchemeFlags, SchemeWithEqualsOrSpace) {
    EXPECT_EQ(parse_merge({"--quantize=fp8"})->quantize_spec.scheme, QuantScheme::Fp8Block);
    EXPECT_EQ(parse_merge({"--quantize", "fp8"})->quantize_spec.scheme, QuantScheme::Fp8Block);
    EXPECT_EQ(parse_merge({"--quantize", "fp8-dynamic", "--quantize_ignore", "x"})->quantize_spec.scheme, QuantScheme::Fp8Dynamic);
    EXPECT_EQ(parse_merge({"--quantize=fp8_dynamic"})->quantize_spec.scheme, QuantScheme::Fp8Dynamic);
    EXPECT_EQ(parse_merge({"--quantize=int", "--bits", "8"})->quantize_spec.scheme, QuantScheme::Int);
    const auto o = parse_merge({"--quantize", "fp8", "--quantize_ignore", "model.layers.0.mlp.down_proj"});
    EXPECT_EQ(o->quantize_spec.ignore, std::vector<std::string>{"model.layers.0.mlp.down_proj"});
}

TEST(QuantizeSchemeFlags, IntFlagsWithFp8AreUsageErrors) {
    EXPECT_EQ(usage_error({"--quantize=fp8", "--bits", "8"}),
              "--bits applies to --quantize=int; --quantize=fp8 writes 8-bit floats with its own scales "
              "(docs/quantization.md)");
    EXPECT_NE(usage_error({"--quantize", "fp8-dynamic", "--group_size", "128"}).find("--group_size applies to"),
              std::string::npos);
    EXPECT_NE(usage_error({"--quantize=fp8", "--asymmetric"}).find("--asymmetric applies to"), std::string::npos);
    EXPECT_EQ(usage_error({"--quantize=fp9"}), "--quantize fp9: expected int, fp8, fp8-block, fp8-dynamic, nvfp4 or mxfp4");
}

TEST(QuantizeSchemeFlags, FourBitFloatSchemes) {
    EXPECT_EQ(parse_merge({"--quantize=nvfp4"})->quantize_spec.scheme, QuantScheme::Nvfp4);
    EXPECT_EQ(parse_merge({"--quantize", "mxfp4", "--quantize_ignore", "x"})->quantize_spec.scheme, QuantScheme::Mxfp4);
    EXPECT_EQ(usage_error({"--quantize=nvfp4", "--group_size", "32"}),
              "--group_size applies to --quantize=int; --quantize=nvfp4 writes 4-bit floats with its own scales "
              "(docs/quantization.md)");
    EXPECT_EQ(usage_error({"--quantize=mxfp4", "--format", "hdf5"}),
              "--quantize=mxfp4 writes a safetensors folder; --format hdf5 does not take the 4-bit float schemes");
}

TEST(QuantizeSchemeFlags, FullBlocksOnlyIsABlockFp8Flag) {
    EXPECT_TRUE(parse_merge({"--quantize=fp8", "--fp8_full_blocks_only"})->quantize_spec.fp8_full_blocks_only);
    EXPECT_TRUE(parse_merge({"--quantize", "fp8", "--fp8-full-blocks-only"})->quantize_spec.fp8_full_blocks_only);
    EXPECT_FALSE(parse_merge({"--quantize=fp8"})->quantize_spec.fp8_full_blocks_only);
    EXPECT_EQ(usage_error({"--fp8_full_blocks_only"}), "--fp8_full_blocks_only applies to --quantize=fp8 (block FP8)");
    EXPECT_EQ(usage_error({"--quantize=fp8-dynamic", "--fp8_full_blocks_only"}),
              "--fp8_full_blocks_only applies to --quantize=fp8 (block FP8); --quantize=fp8-dynamic has no blocks");
    EXPECT_NE(usage_error({"--quantize", "--fp8_full_blocks_only"}).find("--quantize=int has no blocks"), std::string::npos);
}

TEST(QuantizeSchemeFlags, Fp8BlockSchemeAndUe8m0Scales) {
    EXPECT_EQ(parse_merge({"--quantize=fp8-block"})->quantize_spec.scheme, QuantScheme::Fp8CtBlock);
    EXPECT_EQ(parse_merge({"--quantize", "fp8_block"})->quantize_spec.scheme, QuantScheme::Fp8CtBlock);
    EXPECT_EQ(parse_merge({"--quantize=fp8"})->quantize_spec.scale_format, Fp8ScaleFormat::Float);
    EXPECT_EQ(parse_merge({"--quantize=fp8", "--scale_format", "ue8m0"})->quantize_spec.scale_format,
              Fp8ScaleFormat::Ue8m0);
    EXPECT_EQ(parse_merge({"--quantize", "fp8", "--scale-format=float"})->quantize_spec.scale_format,
              Fp8ScaleFormat::Float);
    EXPECT_EQ(usage_error({"--quantize=fp8", "--scale_format", "e8m0"}), "--scale_format e8m0: expected float or ue8m0");
    EXPECT_EQ(usage_error({"--scale_format", "ue8m0"}), "--scale_format applies to --quantize=fp8 (block FP8)");
    for (const char* other : {"fp8-block", "fp8-dynamic", "nvfp4", "mxfp4", "int"})
        EXPECT_EQ(usage_error({std::string("--quantize=") + other, "--scale_format", "ue8m0"}),
                  std::string("--scale_format applies to --quantize=fp8 (block FP8); --quantize=") + other +
                      " stores its scales in its own format")
            << other;
    EXPECT_EQ(usage_error({"--quantize=fp8-block", "--fp8_full_blocks_only"}),
              "--fp8_full_blocks_only applies to --quantize=fp8 (block FP8); --quantize=fp8-block leaves inputs not a "
              "multiple of 128 unquantized, and compressed-tensors loads partial row blocks");
}

TEST(QuantizeSchemeFlags, EverySchemeCombinesWithTheArchive) {
    for (const char* scheme : {"--quantize", "--quantize=fp8", "--quantize=fp8-dynamic", "--quantize=fp8-block"})
        EXPECT_EQ(usage_error({scheme, "--format", "hdf5"}), "") << scheme;
    EXPECT_EQ(usage_error({"--resume", "--format", "hdf5"}), "--format hdf5 does not combine with --resume");
}

}  // namespace
}  // namespace vmerge
