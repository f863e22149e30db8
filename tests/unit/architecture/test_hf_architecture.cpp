// canonical_mtp_key (architecture/hf_architecture.h): Megatron's MTP layers as decoder layers.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "architecture/hf_architecture.h"

namespace vmerge {
namespace {

TEST(MtpKeys, MtpDepthsBecomeDecoderLayersAfterTheLast) {
    int64_t depth = -1;
    EXPECT_EQ(canonical_mtp_key("mtp.layers.0.transformer_layer.self_attention.linear_proj.weight", 61, depth),
              "decoder.layers.61.self_attention.linear_proj.weight");
    EXPECT_EQ(depth, 0);
    EXPECT_EQ(canonical_mtp_key("mtp.layers.2.mtp_model_layer.mlp.experts.3.linear_fc1.weight", 61, depth),
              "decoder.layers.63.mlp.experts.3.linear_fc1.weight");
    EXPECT_EQ(depth, 2);
    EXPECT_EQ(canonical_mtp_key("mtp.layers.1.final_layernorm.weight", 4, depth), "decoder.layers.5.mtp.final_layernorm.weight");
    EXPECT_FALSE(canonical_mtp_key("decoder.layers.1.input_layernorm.weight", 4, depth));
    EXPECT_FALSE(canonical_mtp_key("mtp.layers.x.enorm.weight", 4, depth));
}

// A table with mtp_own_names matches MTP keys as saved, not as layer L + k: mtp_rule_key leaves
// them alone, and the inner layer's later name mtp_model_layer reads as transformer_layer.
TEST(MtpKeys, OwnNamesMatchTheKeyAsSavedUnderEitherInnerLayerName) {
    ArchitectureInfo arch;
    arch.layers = 4;
    arch.mtp_own_names = true;
    TableRule rule;
    rule.from = "mtp.layers.{i}.transformer_layer.self_attention.linear_proj.weight";
    rule.to = "mtp.layers.{i}.self_attn.o_proj.weight";
    arch.rules.push_back(rule);
    int64_t depth = -1;
    EXPECT_FALSE(mtp_rule_key(arch, "mtp.layers.0.transformer_layer.self_attention.linear_proj.weight", depth));
    for (const char* inner : {"transformer_layer", "mtp_model_layer"}) {
        const auto match = match_rule(arch, std::string("mtp.layers.1.") + inner + ".self_attention.linear_proj.weight");
        ASSERT_TRUE(match) << inner;
        EXPECT_EQ(match->hf_names, std::vector<std::string>{"mtp.layers.1.self_attn.o_proj.weight"});
    }
    arch.mtp_own_names = false;  // without it the later name is not read as the first
    EXPECT_FALSE(match_rule(arch, "mtp.layers.1.mtp_model_layer.self_attention.linear_proj.weight"));
    EXPECT_TRUE(mtp_rule_key(arch, "mtp.layers.0.transformer_layer.self_attention.linear_proj.weight", depth));
}

}  // namespace
}  // namespace vmerge
