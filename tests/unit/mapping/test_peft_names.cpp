// PEFT target_modules (mapping/peft_names.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mapping/peft_names.h"

namespace vmerge {
namespace {

TEST(LoraTargetModules, LeafNamesOnlyWhenEveryModuleWithTheLeafIsAdapted) {
    const std::vector<std::string> base{"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj",
                                        "model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"};
    EXPECT_EQ(peft_target_modules({"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"}, base),
              (std::vector<std::string>{"model.layers.0.mlp.down_proj", "model.layers.0.self_attn.q_proj"}));
    EXPECT_EQ(peft_target_modules({"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj",
                                   "model.layers.1.mlp.down_proj"},
                                  base),
              (std::vector<std::string>{"model.layers.1.mlp.down_proj", "q_proj"}));
}

}  // namespace
}  // namespace vmerge
