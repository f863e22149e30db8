// The tensor-parallel rules Megatron reads from the shipped architecture tables
// (megatron_tp_rule of formats/megatron/megatron_backend.h).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "formats/megatron/megatron_backend.h"
#include "test_support.h"

namespace vmerge {
namespace {

// The TP rules of the shipped Megatron tables, per docs/reference/megatron-formats.md §2
// (ColumnParallelLinear rows, RowParallelLinear columns, SwiGLU halves, TE-duplicated MLA
// down-projections, replicated norms), and a LoRA adapter's from its base weight.
TEST(ArchitectureTable, ShippedMegatronTablesGiveTheTensorParallelRules) {
    const HfConfig config = parse_hf_config("/hf", R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 32,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 64, "intermediate_size": 48,
        "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1,
        "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "num_nextn_predict_layers": 1})");
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    EXPECT_TRUE(arch.table_file.ends_with("megatron_moe_deepseek_v3.json")) << arch.table_file;
    const std::vector<std::pair<std::string, TpRule>> expected{
        {"embedding.word_embeddings.weight", TpRule::Concat0},
        {"output_layer.weight", TpRule::Concat0},
        {"decoder.final_layernorm.weight", TpRule::Replicated},
        {"decoder.layers.0.self_attention.linear_proj.weight", TpRule::Concat1},
        {"decoder.layers.0.self_attention.linear_q_up_proj.weight", TpRule::Concat0},
        {"decoder.layers.0.self_attention.linear_kv_down_proj.weight", TpRule::ReplicatedIfFull},
        {"decoder.layers.0.mlp.linear_fc1.weight", TpRule::GluHalves},
        {"decoder.layers.1.mlp.experts.3.linear_fc2.weight", TpRule::Concat1},
        {"decoder.layers.1.mlp.router.weight", TpRule::Replicated},
        {"mtp.layers.0.eh_proj.weight", TpRule::Concat0},
        {"mtp.layers.0.transformer_layer.mlp.experts.2.linear_fc1.weight", TpRule::GluHalves},
        {"decoder.layers.0.self_attention.linear_proj.adapter.linear_in.weight", TpRule::Concat1},
        {"decoder.layers.0.self_attention.linear_proj.adapter.linear_out.weight", TpRule::Concat0},
        {"decoder.layers.0.mlp.linear_fc1.adapter.linear_out.weight", TpRule::GluHalves},
    };
    for (const auto& [key, rule] : expected) {
        const auto got = megatron_tp_rule(key, arch);
        ASSERT_TRUE(got) << key;
        EXPECT_EQ(tp_rule_name(*got), std::string(tp_rule_name(rule))) << key;
    }
    EXPECT_FALSE(megatron_tp_rule("decoder.layers.0.mlp.linear_fc1.bias", arch));  // no HF name: unmapped
    const auto qkv = match_rule(arch, "decoder.layers.1.self_attention.linear_q_down_proj.weight");
    ASSERT_TRUE(qkv);
    EXPECT_EQ(qkv->hf_names, std::vector<std::string>{"model.layers.1.self_attn.q_a_proj.weight"});
}

}  // namespace
}  // namespace vmerge
