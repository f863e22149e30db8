// module_alpha (mapping/lora_hyperparameters.h): alpha_pattern keys match module suffixes.
#include <gtest/gtest.h>

#include "mapping/lora_hyperparameters.h"

namespace vmerge {
namespace {

TEST(LoraAdapter, AlphaPatternMatchesModuleSuffixes) {
    LoraHyperparameters h;
    h.alpha = 16;
    h.alpha_pattern = {{"q_proj", 4}, {"layers\\.1\\.mlp\\.down_proj", 2}};
    EXPECT_EQ(module_alpha(h, "model.layers.0.self_attn.q_proj"), 4);
    EXPECT_EQ(module_alpha(h, "model.layers.0.self_attn.k_proj"), 16);
    EXPECT_EQ(module_alpha(h, "model.layers.1.mlp.down_proj"), 2);
    EXPECT_EQ(module_alpha(h, "model.layers.11.mlp.down_proj"), 16);
    EXPECT_EQ(module_alpha(h, "model.layers.0.self_attn.xq_proj"), 16);
}

}  // namespace
}  // namespace vmerge
