// take_megatron_adapters (formats/megatron/megatron_lora.h): a torch_dist archive's adapters.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "formats/megatron/megatron_lora.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::mapping_of;

// The adapters of a torch_dist archive leave the base behind in order, both still copying
// from the same sources (the canonical mapping's, unchanged).
TEST(MegatronLora, AdapterTensorsAreTakenOutOfTheCanonicalMapping) {
    TensorMapping canonical = mapping_of({{"decoder.layers.0.self_attention.linear_qkv.weight", {8, 4}},
                                          {"decoder.layers.0.self_attention.linear_qkv.adapter.linear_in.weight", {2, 4}},
                                          {"decoder.layers.0.self_attention.linear_qkv.adapter.linear_out.weight", {8, 2}},
                                          {"decoder.final_layernorm.weight", {4}}});
    const TensorMapping adapters = take_megatron_adapters(canonical);
    ASSERT_EQ(canonical.tensors.size(), 2u);
    EXPECT_EQ(canonical.tensors[0].name, "decoder.layers.0.self_attention.linear_qkv.weight");
    EXPECT_EQ(canonical.tensors[1].name, "decoder.final_layernorm.weight");
    EXPECT_EQ(canonical.tensors[1].copies[0].source, 3u);
    ASSERT_EQ(adapters.tensors.size(), 2u);
    EXPECT_EQ(adapters.tensors[0].name, "decoder.layers.0.self_attention.linear_qkv.adapter.linear_in.weight");
    EXPECT_EQ(adapters.tensors[1].copies[0].source, 2u);
    EXPECT_EQ(adapters.sources.size(), canonical.sources.size());
    EXPECT_EQ(adapters.sources[2].storage.key, canonical.sources[2].storage.key);
    TensorMapping plain = mapping_of({{"decoder.layers.0.mlp.linear_fc2.weight", {4, 4}}});
    EXPECT_TRUE(take_megatron_adapters(plain).tensors.empty());
    EXPECT_EQ(plain.tensors.size(), 1u);
}

}  // namespace
}  // namespace vmerge
