// canonical_mtp_key (architecture/hf_architecture.h): Megatron's MTP layers as decoder layers.
#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace vmerge
