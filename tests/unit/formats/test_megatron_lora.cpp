// take_megatron_adapters and megatron_adapters_to_peft (formats/megatron/megatron_lora.h): a
// torch_dist archive's adapters; MoE expert and shared-expert adapters in PEFT form.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "core/error.h"
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

// One Qwen2-MoE layer: 2 experts of width 16 and a shared expert of width 24, hidden 32.
HfConfig qwen2_moe_config() {
    return parse_hf_config("/hf", R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 32,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "vocab_size": 64,
        "intermediate_size": 48, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24,
        "num_experts": 2, "num_experts_per_tok": 1, "decoder_sparse_step": 1, "mlp_only_layers": []})");
}

// A SequentialMLP expert's adapter (canonical names: global expert number) becomes that
// expert's gate/up/down PEFT modules, A shared by gate and up and B split into its halves, as
// Megatron-Bridge exports it; the shared expert's go to the HF shared_expert modules.
TEST(MegatronLora, ExpertAndSharedExpertAdaptersBecomePerExpertPeftModules) {
    const HfConfig config = qwen2_moe_config();
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    const TensorMapping canonical = mapping_of({
        {"decoder.layers.0.mlp.experts.1.linear_fc1.adapter.linear_in.weight", {4, 32}},
        {"decoder.layers.0.mlp.experts.1.linear_fc1.adapter.linear_out.weight", {32, 4}},
        {"decoder.layers.0.mlp.experts.1.linear_fc2.adapter.linear_in.weight", {4, 16}},
        {"decoder.layers.0.mlp.shared_experts.linear_fc1.adapter.linear_out.weight", {48, 4}}});
    std::vector<std::string> notes;
    const TensorMapping peft = megatron_adapters_to_peft(canonical, arch, config, notes);
    std::vector<std::pair<std::string, Shape>> got;
    for (const auto& t : peft.tensors) got.emplace_back(t.name, t.shape);
    const std::string p = "base_model.model.model.layers.0.mlp.";
    const std::vector<std::pair<std::string, Shape>> want{
        {p + "experts.1.gate_proj.lora_A.default.weight", {4, 32}},
        {p + "experts.1.up_proj.lora_A.default.weight", {4, 32}},
        {p + "experts.1.gate_proj.lora_B.default.weight", {16, 4}},
        {p + "experts.1.up_proj.lora_B.default.weight", {16, 4}},
        {p + "experts.1.down_proj.lora_A.default.weight", {4, 16}},
        {p + "shared_expert.gate_proj.lora_B.default.weight", {24, 4}},
        {p + "shared_expert.up_proj.lora_B.default.weight", {24, 4}}};
    EXPECT_EQ(got, want);
    // up_proj's B is the second half of linear_out's rows.
    const auto up = std::find_if(peft.tensors.begin(), peft.tensors.end(),
                                 [&](const OutputTensor& t) { return t.name == p + "experts.1.up_proj.lora_B.default.weight"; });
    ASSERT_NE(up, peft.tensors.end());
    ASSERT_EQ(up->copies.size(), 1u);
    EXPECT_EQ(up->copies[0].source, 1u);
    EXPECT_EQ(up->copies[0].src_start, (Shape{16, 0}));
}

// A grouped-experts (TEGroupedMLP) adapter, one for every expert of the rank, is refused by name.
TEST(MegatronLora, GroupedExpertsAdapterIsRefusedNamingIt) {
    const HfConfig config = qwen2_moe_config();
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    const TensorMapping canonical = mapping_of({{"decoder.layers.0.mlp.experts.linear_fc1.adapter.linear_in.weight", {4, 32}}});
    std::vector<std::string> notes;
    try {
        megatron_adapters_to_peft(canonical, arch, config, notes);
        FAIL() << "accepted a grouped-experts adapter";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'decoder.layers.0.mlp.experts.linear_fc1.adapter.linear_in.weight'"), std::string::npos) << what;
        EXPECT_NE(what.find("TEGroupedMLP"), std::string::npos) << what;
    }
}

}  // namespace
}  // namespace vmerge
