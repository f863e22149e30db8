// The tensor-parallel rules Megatron reads from the shipped architecture tables
// (megatron_tp_rule of formats/megatron/megatron_backend.h).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/config_check.h"
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

// A tiny Qwen2.5-VL config.json as transformers 5 writes it: the text sizes in text_config only.
HfConfig qwen2_5_vl_config() {
    return parse_hf_config("/hf", R"({"architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "text_config": {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                        "vocab_size": 64, "intermediate_size": 24},
        "vision_config": {"depth": 2, "hidden_size": 4, "intermediate_size": 6, "num_heads": 2, "patch_size": 2,
                          "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 16}})");
}

// mbridge's names: each part of the model (language_model., vision_model.) numbers its own
// layers; the text sizes come from text_config; the ViT's layers are tensor-parallel like the
// text layers', its projector column- then row-parallel.
TEST(ArchitectureTable, MultimodalPartsKeepTheirPrefixAndTheirRules) {
    const ArchitectureInfo arch = architecture_for(qwen2_5_vl_config(), false, false, testing::shipped_tables());
    EXPECT_TRUE(arch.table_file.ends_with("megatron_qwen2_5_vl.json")) << arch.table_file;
    EXPECT_EQ(arch.hidden, 16);
    EXPECT_EQ(arch.kv_heads, 2);
    EXPECT_EQ(arch.head_dim, 4);
    EXPECT_EQ(arch.vocab, 64);
    EXPECT_EQ(megatron_submodel_prefix("vision_model.decoder.layers.0.x"), "vision_model.");
    EXPECT_EQ(megatron_submodel_prefix("decoder.layers.0.x"), "");
    const std::vector<std::pair<std::string, TpRule>> expected{
        {"language_model.embedding.word_embeddings.weight", TpRule::Concat0},
        {"language_model.decoder.layers.1.self_attention.linear_qkv.bias", TpRule::Concat0},
        {"language_model.decoder.layers.1.mlp.linear_fc1.weight", TpRule::GluHalves},
        {"vision_model.decoder.layers.1.self_attention.linear_qkv.weight", TpRule::Concat0},
        {"vision_model.decoder.layers.1.self_attention.linear_proj.weight", TpRule::Concat1},
        {"vision_model.decoder.layers.1.self_attention.linear_proj.bias", TpRule::Replicated},
        {"vision_model.decoder.layers.0.mlp.linear_fc1.bias", TpRule::GluHalves},
        {"vision_model.decoder.layers.0.mlp.linear_fc2.weight", TpRule::Concat1},
        {"vision_model.projection.encoder.linear_fc1.weight", TpRule::Concat0},
        {"vision_model.projection.encoder.linear_fc2.weight", TpRule::Concat1},
        {"vision_model.patch_embed.proj.weight", TpRule::Replicated},
    };
    for (const auto& [key, rule] : expected) {
        const auto got = megatron_tp_rule(key, arch);
        ASSERT_TRUE(got) << key;
        EXPECT_EQ(tp_rule_name(*got), std::string(tp_rule_name(rule))) << key;
    }
    const auto norm = match_rule(arch, "vision_model.decoder.layers.1.self_attention.linear_qkv.layer_norm_weight");
    ASSERT_TRUE(norm);
    EXPECT_EQ(norm->hf_names, std::vector<std::string>{"visual.blocks.1.norm1.weight"});
    const auto text = match_rule(arch, "language_model.decoder.layers.1.input_layernorm.weight");
    ASSERT_TRUE(text);
    EXPECT_EQ(text->hf_names, std::vector<std::string>{"model.layers.1.input_layernorm.weight"});
    EXPECT_FALSE(match_rule(arch, "decoder.layers.1.input_layernorm.weight"));  // a GPTModel's name is not the VL's
}

// Megatron-Bridge's Qwen3-VL keeps transformers' vision model whole under vision_model.: one
// {*} rule renames it (replicated over TP); the text model is Qwen3's under language_model.
TEST(ArchitectureTable, Qwen3VlVisionModelIsRenamedWhole) {
    const HfConfig config = parse_hf_config("/hf", R"({"architectures": ["Qwen3VLForConditionalGeneration"],
        "text_config": {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
                        "vocab_size": 64, "intermediate_size": 24, "head_dim": 8},
        "vision_config": {"depth": 2, "hidden_size": 4, "intermediate_size": 6, "num_heads": 2, "patch_size": 2,
                          "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 16,
                          "num_position_embeddings": 4, "deepstack_visual_indexes": [0]}})");
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    EXPECT_TRUE(arch.table_file.ends_with("megatron_qwen3_vl.json")) << arch.table_file;
    EXPECT_EQ(arch.head_dim, 8);
    const auto vision = match_rule(arch, "vision_model.deepstack_merger_list.0.linear_fc1.weight");
    ASSERT_TRUE(vision);
    EXPECT_EQ(vision->hf_names, std::vector<std::string>{"model.visual.deepstack_merger_list.0.linear_fc1.weight"});
    EXPECT_EQ(tp_rule_name(*megatron_tp_rule("vision_model.blocks.1.attn.qkv.weight", arch)), std::string("replicated"));
    const auto qkv = match_rule(arch, "language_model.decoder.layers.1.self_attention.linear_qkv.weight");
    ASSERT_TRUE(qkv);
    EXPECT_EQ(qkv->hf_names[2], "model.language_model.layers.1.self_attn.v_proj.weight");
    const auto norm = match_rule(arch, "language_model.decoder.layers.0.self_attention.k_layernorm.weight");
    ASSERT_TRUE(norm);
    EXPECT_EQ(norm->hf_names, std::vector<std::string>{"model.language_model.layers.0.self_attn.k_norm.weight"});
}

// Which source row each output row of `t` copies (every copy of one source).
std::vector<int64_t> row_sources(const OutputTensor& t) {
    std::vector<int64_t> rows(static_cast<size_t>(t.shape[0]), -1);
    for (const BoxCopy& c : t.copies)
        for (int64_t k = 0; k < c.extent[0]; ++k) rows[static_cast<size_t>(c.dst_start[0] + k)] = c.src_start[0] + k;
    return rows;
}

// The ViT's qkv, [q_h; k_h; v_h] per head h, becomes HF's one [Q; K; V] tensor: head h of q at
// rows h*d, of k at Hv + h*d, of v at 2Hv + h*d (vision_config.num_heads 2, head dim 2).
TEST(MegatronToHf, QkvPerHeadWritesOneQkvTensor) {
    const HfConfig config = qwen2_5_vl_config();
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    const std::string key = "vision_model.decoder.layers.1.self_attention.linear_qkv.weight";
    const auto match = match_rule(arch, key);
    ASSERT_TRUE(match);
    OutputTensor qkv = testing::tensor(key, DType::BF16, {12, 4});
    qkv.copies.push_back({0, {0, 0}, {0, 0}, {12, 4}});
    std::vector<std::string> notes;
    const auto made = split_to_hf(qkv, *match, arch, config, notes);
    ASSERT_EQ(made.size(), 1u);
    EXPECT_EQ(made[0].name, "visual.blocks.1.attn.qkv.weight");
    EXPECT_EQ(made[0].shape, (Shape{12, 4}));
    EXPECT_EQ(row_sources(made[0]), (std::vector<int64_t>{0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11}));
    // Half the rows (a tensor-parallel shard short): named against what config.json implies.
    OutputTensor half = testing::tensor(key, DType::BF16, {6, 4});
    half.copies.push_back({0, {0, 0}, {0, 0}, {6, 4}});
    EXPECT_TRUE(testing::contains(testing::error_of([&] { split_to_hf(half, *match, arch, config, notes); }),
                                  "[6, 4] rows, but 3 x 2 heads (vision_config.num_heads in /hf/config.json) x head dim 2 = 12"))
        << testing::error_of([&] { split_to_hf(half, *match, arch, config, notes); });
    OutputTensor odd = testing::tensor(key, DType::BF16, {10, 4});
    odd.copies.push_back({0, {0, 0}, {0, 0}, {10, 4}});
    EXPECT_TRUE(testing::contains(testing::error_of([&] { split_to_hf(odd, *match, arch, config, notes); }),
                                  "rows are not q, k and v of 2 heads"));
}


// A tiny Qwen3-VL-MoE config.json (transformers 5): 2 layers of 3 experts, moe_intermediate_size 2.
HfConfig qwen3_vl_moe_config() {
    return parse_hf_config("/hf", R"({"architectures": ["Qwen3VLMoeForConditionalGeneration"],
        "text_config": {"hidden_size": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1,
                        "vocab_size": 8, "intermediate_size": 6, "head_dim": 2, "num_experts": 3,
                        "moe_intermediate_size": 2},
        "vision_config": {"depth": 1, "hidden_size": 4, "intermediate_size": 6, "num_heads": 2, "patch_size": 2,
                          "temporal_patch_size": 2, "spatial_merge_size": 2, "out_hidden_size": 4,
                          "num_position_embeddings": 4, "deepstack_visual_indexes": [0]}})");
}

// Megatron's per-expert tensors as transformers 5's fused experts: expert e's linear_fc1 [2F, H]
// (its [gate; up] rows) lands at index e of mlp.experts.gate_up_proj [E, 2F, H], each read through
// a view of its source with a unit leading axis; an expert the checkpoint lacks is named.
TEST(MegatronToHf, StackExpertsFusesEveryExpertAndNamesAMissingOne) {
    const HfConfig config = qwen3_vl_moe_config();
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    EXPECT_TRUE(arch.table_file.ends_with("megatron_qwen3_vl_moe.json")) << arch.table_file;
    auto experts_of = [](std::vector<int> which) {
        TensorMapping m;
        for (int e : which) {
            const std::string key = "language_model.decoder.layers.0.mlp.experts." + std::to_string(e) + ".linear_fc1.weight";
            TensorRef ref;
            ref.dtype = DType::BF16;
            ref.shape = {4, 4};
            ref.stride = {4, 1};
            ref.storage_offset = 16 * e;
            m.sources.push_back(ref);
            OutputTensor t = testing::tensor(key, DType::BF16, {4, 4});
            t.copies.push_back({static_cast<uint32_t>(m.sources.size() - 1), {0, 0}, {0, 0}, {4, 4}});
            m.tensors.push_back(std::move(t));
        }
        return m;
    };
    const ExpectedTensors expected = arch.expected;
    ArchitectureInfo only_experts = arch;  // the rest of the model is not under test here
    only_experts.expected = {};
    only_experts.tensor_set_file.clear();
    std::vector<std::string> notes;
    const TensorMapping out = megatron_to_hf(experts_of({2, 0, 1}), only_experts, config, false, notes);
    ASSERT_EQ(out.tensors.size(), 1u);
    const OutputTensor& fused = out.tensors[0];
    EXPECT_EQ(fused.name, "model.language_model.layers.0.mlp.experts.gate_up_proj");
    EXPECT_EQ(fused.shape, (Shape{3, 4, 4}));
    EXPECT_EQ(expected.required.at(fused.name), fused.shape);  // what config.json implies
    ASSERT_EQ(fused.copies.size(), 3u);
    for (const BoxCopy& c : fused.copies) {
        const TensorRef& view = out.sources[c.source];
        EXPECT_EQ(view.shape, (Shape{1, 4, 4}));
        EXPECT_EQ(view.storage_offset, 16 * c.dst_start[0]);  // expert e's own tensor at index e
        EXPECT_EQ(c.extent, (Shape{1, 4, 4}));
    }
    EXPECT_EQ(testing::error_of([&] { megatron_to_hf(experts_of({0, 2}), only_experts, config, false, notes); }),
              "model.language_model.layers.0.mlp.experts.gate_up_proj: fused from 3 experts (text_config.num_experts ?? "
              "text_config.num_local_experts ?? num_experts ?? num_local_experts in /hf/config.json), but the checkpoint "
              "has no language_model.decoder.layers.0.mlp.experts.1.linear_fc1.weight");
    EXPECT_TRUE(testing::contains(
        testing::error_of([&] { megatron_to_hf(experts_of({0, 1, 2, 3}), only_experts, config, false, notes); }),
        "but the checkpoint also has language_model.decoder.layers.0.mlp.experts.3.linear_fc1.weight"));
}

// GLM-4.5 as mbridge's GLM4MoEBridge names it: q/k/v biases and q/k norms, the router's
// expert_bias as e_score_correction_bias, shared experts, experts written one by one as
// transformers 5's save_pretrained writes Glm4Moe's (tests/ecosystem/gen_megatron_glm4_moe.py).
HfConfig glm4_moe_config() {
    return parse_hf_config("/hf", R"({"architectures": ["Glm4MoeForCausalLM"], "hidden_size": 32,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 64,
        "intermediate_size": 48, "moe_intermediate_size": 8, "n_routed_experts": 4, "n_shared_experts": 1,
        "first_k_dense_replace": 1, "attention_bias": true, "use_qk_norm": true, "num_nextn_predict_layers": 1})");
}

TEST(ArchitectureTable, Glm4MoeTakesMbridgesNames) {
    const HfConfig config = glm4_moe_config();
    const ArchitectureInfo arch = architecture_for(config, false, true, testing::shipped_tables());
    EXPECT_TRUE(arch.table_file.ends_with("megatron_glm4_moe.json")) << arch.table_file;
    const std::vector<std::pair<std::string, std::vector<std::string>>> names{
        {"decoder.layers.1.mlp.router.expert_bias", {"model.layers.1.mlp.gate.e_score_correction_bias"}},
        {"decoder.layers.1.mlp.router.weight", {"model.layers.1.mlp.gate.weight"}},
        {"decoder.layers.1.self_attention.q_layernorm.weight", {"model.layers.1.self_attn.q_norm.weight"}},
        {"decoder.layers.1.mlp.shared_experts.linear_fc2.weight", {"model.layers.1.mlp.shared_experts.down_proj.weight"}},
        {"decoder.layers.1.mlp.experts.3.linear_fc1.weight",
         {"model.layers.1.mlp.experts.3.gate_proj.weight", "model.layers.1.mlp.experts.3.up_proj.weight"}},
        {"decoder.layers.0.self_attention.linear_qkv.bias",
         {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.k_proj.bias",
          "model.layers.0.self_attn.v_proj.bias"}},
    };
    for (const auto& [key, hf] : names) {
        const auto match = match_rule(arch, key);
        ASSERT_TRUE(match) << key;
        EXPECT_EQ(match->hf_names, hf) << key;
        for (const auto& name : hf) EXPECT_TRUE(arch.expected.required.count(name)) << name;
    }
    EXPECT_EQ(tp_rule_name(*megatron_tp_rule("decoder.layers.1.mlp.experts.3.linear_fc2.weight", arch)),
              std::string(tp_rule_name(TpRule::Concat1)));
    EXPECT_EQ(tp_rule_name(*megatron_tp_rule("decoder.layers.1.mlp.shared_experts.linear_fc1.weight", arch)),
              std::string(tp_rule_name(TpRule::GluHalves)));
}

// config.json declares an MTP layer the checkpoint lacks (mbridge's GLM-4.5 bridge builds none):
// the refusal says --drop_mtp; a checkpoint that holds its MTP layer gets the plain list.
TEST(ArchitectureTable, MissingMtpLayersPointToDropMtp) {
    const HfConfig config = glm4_moe_config();
    const ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    TensorMapping none;
    const std::string error = testing::error_of([&] { check_against_config(none, config, arch); });
    EXPECT_TRUE(testing::contains(error, "missing: ")) << error;
    EXPECT_TRUE(testing::contains(error, "declares num_nextn_predict_layers 1 but the checkpoint holds no "
                                         "multi-token prediction layer (mtp.layers.*): --drop_mtp")) << error;
    TensorMapping with_mtp;
    with_mtp.tensors.push_back(testing::tensor("model.layers.2.enorm.weight", DType::BF16, {32}));
    EXPECT_FALSE(testing::contains(testing::error_of([&] { check_against_config(with_mtp, config, arch); }), "--drop_mtp"));
}

TEST(ArchitectureTable, UnmappedMtpTensorsSayWhy) {
    // A depth config.json does not count, and one it counts that the table has no rule for.
    const HfConfig config = glm4_moe_config();
    ArchitectureInfo arch = architecture_for(config, false, false, testing::shipped_tables());
    std::vector<std::string> notes;
    TensorMapping beyond;
    beyond.tensors.push_back(testing::tensor("mtp.layers.1.enorm.weight", DType::BF16, {32}));
    const std::string beyond_error = testing::error_of([&] { megatron_to_hf(beyond, arch, config, false, notes); });
    EXPECT_TRUE(testing::contains(beyond_error, "beyond config.json's num_nextn_predict_layers 1")) << beyond_error;
    std::erase_if(arch.rules, [](const TableRule& r) { return r.from.find(".mtp.") != std::string::npos; });
    TensorMapping counted;
    counted.tensors.push_back(testing::tensor("mtp.layers.0.enorm.weight", DType::BF16, {32}));
    const std::string rule_error = testing::error_of([&] { megatron_to_hf(counted, arch, config, false, notes); });
    EXPECT_TRUE(testing::contains(rule_error, "(multi-token prediction tensors " + arch.table_file +
                                                  " has no rule for: --drop_mtp leaves them out)"))
        << rule_error;
}

}  // namespace
}  // namespace vmerge
