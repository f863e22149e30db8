// The tensor-parallel rules Megatron reads from the shipped architecture tables
// (megatron_tp_rule of formats/megatron/megatron_backend.h).
#include <gtest/gtest.h>

#include <fstream>
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

// A made-up gated model for the Qwen3-Next rule kinds, its table written here so that the
// layouts below are those of the rule kinds, not of a shipped table: 4 query heads in 2 query
// groups of head dim 2; in_proj of sections [Q 4; K 2; V 6; B 2; A 2] rows (nk = 2 key heads),
// the first three going to qkvz, the last two to ba; conv1d of sections [Q; K; V].
const char* kTinyGatedTable = R"({"vmerge_architecture_table": 1, "name": "tiny gated", "source": "megatron",
    "architectures": ["TinyGatedForCausalLM"], "rules": [
    {"from": "decoder.layers.{i}.self_attention.linear_qkv.weight",
     "to": ["model.layers.{i}.self_attn.q_proj.weight", "model.layers.{i}.self_attn.k_proj.weight",
            "model.layers.{i}.self_attn.v_proj.weight"], "split": "qkv_gated", "tp": "dim0"},
    {"from": "decoder.layers.{i}.self_attention.in_proj.weight",
     "to": ["model.layers.{i}.linear_attn.in_proj_qkvz.weight", "model.layers.{i}.linear_attn.in_proj_ba.weight"],
     "split": "grouped_sections", "groups": "nk", "tp": "sections",
     "sections": [{"rows": "nk * 2", "part": "query", "to": 0}, {"rows": "nk", "part": "key", "to": 0},
                  {"rows": "nk * 3", "part": "value", "to": 0}, {"rows": "nk", "part": "beta", "to": 1},
                  {"rows": "nk", "part": "alpha", "to": 1}]},
    {"from": "decoder.layers.{i}.self_attention.conv1d.weight", "to": "model.layers.{i}.linear_attn.conv1d.weight",
     "tp": "sections", "sections": [{"rows": "nk * 2", "part": "query"}, {"rows": "nk", "part": "key"},
                                    {"rows": "nk * 3", "part": "value"}]},
    {"from": "decoder.layers.{i}.self_attention.out_norm.weight", "to": "model.layers.{i}.linear_attn.norm.weight",
     "add": 1}]})";

HfConfig tiny_gated_config() {
    return parse_hf_config("/hf", R"({"architectures": ["TinyGatedForCausalLM"], "hidden_size": 8,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 2, "num_hidden_layers": 1, "vocab_size": 8,
        "nk": 2})");
}

// The architecture of tiny_gated_config() by kTinyGatedTable (no tensor set: nothing to check
// the output against).
ArchitectureInfo tiny_gated_arch(const HfConfig& config) {
    testing::TempDir dir;
    const std::string file = dir.path() + "/tiny_gated.json";
    std::ofstream(file) << kTinyGatedTable;
    return architecture_for(config, false, false, load_architecture_tables({file}));
}

// A tensor whose one copy takes the whole of source 0, of `shape`.
OutputTensor whole(const std::string& name, Shape shape) {
    OutputTensor t = testing::tensor(name, DType::BF16, shape);
    t.copies.push_back({0, Shape(shape.size(), 0), Shape(shape.size(), 0), shape});
    return t;
}

// Which (source, source row) each row of `t` copies; (-1, -1) for a row no copy writes.
std::vector<std::pair<int64_t, int64_t>> row_origins(const OutputTensor& t) {
    std::vector<std::pair<int64_t, int64_t>> rows(static_cast<size_t>(t.shape[0]), {-1, -1});
    for (const BoxCopy& c : t.copies)
        for (int64_t k = 0; k < c.extent[0]; ++k)
            rows[static_cast<size_t>(c.dst_start[0] + k)] = {c.source, c.src_start[0] + k};
    return rows;
}

// Gated attention, per query group g [q heads 2g, 2g+1; their gates; k_g; v_g] of 2 rows each
// (group 0 rows 0-11, group 1 rows 12-23), into HF's q_proj [q_h; gate_h] per head h, k_proj, v_proj.
TEST(MegatronToHf, QkvGatedPutsEachGateAfterItsQueryHead) {
    const HfConfig config = tiny_gated_config();
    const ArchitectureInfo arch = tiny_gated_arch(config);
    const std::string key = "decoder.layers.0.self_attention.linear_qkv.weight";
    const auto match = match_rule(arch, key);
    ASSERT_TRUE(match);
    std::vector<std::string> notes;
    const auto made = split_to_hf(whole(key, {24, 8}), *match, arch, config, notes);
    ASSERT_EQ(made.size(), 3u);
    EXPECT_EQ(made[0].name, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(made[1].name, "model.layers.0.self_attn.k_proj.weight");
    EXPECT_EQ(made[2].name, "model.layers.0.self_attn.v_proj.weight");
    EXPECT_EQ(made[0].shape, (Shape{16, 8}));
    EXPECT_EQ(made[1].shape, (Shape{4, 8}));
    EXPECT_EQ(made[2].shape, (Shape{4, 8}));
    // q0 rows 0-1, gate0 4-5; q1 2-3, gate1 6-7; q2 12-13, gate2 16-17; q3 14-15, gate3 18-19.
    EXPECT_EQ(row_sources(made[0]), (std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7, 12, 13, 16, 17, 14, 15, 18, 19}));
    EXPECT_EQ(row_sources(made[1]), (std::vector<int64_t>{8, 9, 20, 21}));
    EXPECT_EQ(row_sources(made[2]), (std::vector<int64_t>{10, 11, 22, 23}));
    for (const auto& o : made) EXPECT_EQ(o.value_offset, 0.0) << o.name;
    const std::string short_error =
        testing::error_of([&] { split_to_hf(whole(key, {12, 8}), *match, arch, config, notes); });
    EXPECT_TRUE(testing::contains(short_error, key + ": [12, 8] rows, but (2 x heads 4 (q and its gate) + 2 x kv heads 2) "
                                                     "x head_dim 2 = 24"))
        << short_error;
}

// in_proj [Q 0-3; K 4-5; V 6-11; B 12-13; A 14-15] in 2 groups: qkvz holds per group g
// [Q chunk g (2 rows); K chunk g (1); V chunk g (3)], ba per group [B chunk g; A chunk g].
TEST(MegatronToHf, GroupedSectionsTakeEachGroupsChunkOfEverySection) {
    const HfConfig config = tiny_gated_config();
    const ArchitectureInfo arch = tiny_gated_arch(config);
    const std::string key = "decoder.layers.0.self_attention.in_proj.weight";
    const auto match = match_rule(arch, key);
    ASSERT_TRUE(match);
    std::vector<std::string> notes;
    const auto made = split_to_hf(whole(key, {16, 2}), *match, arch, config, notes);
    ASSERT_EQ(made.size(), 2u);
    EXPECT_EQ(made[0].name, "model.layers.0.linear_attn.in_proj_qkvz.weight");
    EXPECT_EQ(made[1].name, "model.layers.0.linear_attn.in_proj_ba.weight");
    EXPECT_EQ(made[0].shape, (Shape{12, 2}));
    EXPECT_EQ(made[1].shape, (Shape{4, 2}));
    EXPECT_EQ(row_sources(made[0]), (std::vector<int64_t>{0, 1, 4, 6, 7, 8, 2, 3, 5, 9, 10, 11}));
    EXPECT_EQ(row_sources(made[1]), (std::vector<int64_t>{12, 14, 13, 15}));
    const std::string short_error =
        testing::error_of([&] { split_to_hf(whole(key, {14, 2}), *match, arch, config, notes); });
    EXPECT_TRUE(testing::contains(short_error, key + ": [14, 2] rows, but its sections are 4 + 2 + 6 + 2 + 2 = 16 rows "
                                                     "by config.json"))
        << short_error;
}

// A hand-made legacy save of tensor-parallel size 2 holding `key` as [rows, 2] on each rank
// (rank r's file /ckpt/mp_rank_0r/model.pt).
struct TinyLegacySave {
    MegatronLegacyCheckpoint ckpt;
    std::vector<ScannedFile> scans;
};
TinyLegacySave tp2_save(const std::string& key, int64_t rows) {
    TinyLegacySave save;
    save.ckpt.dir = "/ckpt";
    save.ckpt.flavor = "verl";
    for (int r = 0; r < 2; ++r) {
        MegatronRankFile f;
        f.dir_name = "mp_rank_0" + std::to_string(r);
        f.path = "/ckpt/" + f.dir_name + "/model.pt";
        f.tp = r;
        save.ckpt.files.push_back(f);
        save.scans.push_back(testing::scan_of(f.path, {StateDictEntry{key, testing::stored({rows, 2}, f.path, 0), 0}}));
    }
    return save;
}

// tp sections: rank r holds [Q_r 2; K_r 1; V_r 3; B_r 1; A_r 1] (8 rows, sources 0 and 1); the
// canonical tensor is [Q; K; V; B; A], each section rank 0's share then rank 1's.
TEST(MegatronLegacy, TpSectionsJoinEachSectionsShares) {
    const HfConfig config = tiny_gated_config();
    const ArchitectureInfo arch = tiny_gated_arch(config);
    const std::string key = "decoder.layers.0.self_attention.in_proj.weight";
    const TinyLegacySave save = tp2_save(key, 8);
    MegatronParallelism found;
    const TensorMapping m = assemble_megatron_legacy(save.ckpt, save.scans, arch, found);
    EXPECT_EQ(found.tp, 2);
    ASSERT_EQ(m.tensors.size(), 1u);
    EXPECT_EQ(m.tensors[0].name, key);
    EXPECT_EQ(m.tensors[0].shape, (Shape{16, 2}));
    ASSERT_EQ(m.sources.size(), 2u);
    EXPECT_EQ(m.sources[0].storage.file, "/ckpt/mp_rank_00/model.pt");
    const std::vector<std::pair<int64_t, int64_t>> want{
        {0, 0}, {0, 1}, {1, 0}, {1, 1},          // Q
        {0, 2}, {1, 2},                          // K
        {0, 3}, {0, 4}, {0, 5}, {1, 3}, {1, 4}, {1, 5},  // V
        {0, 6}, {1, 6},                          // B
        {0, 7}, {1, 7}};                         // A
    EXPECT_EQ(row_origins(m.tensors[0]), want);
    // 7 rows a rank: 14, not the 16 the sections add up to.
    const TinyLegacySave short_save = tp2_save(key, 7);
    EXPECT_EQ(testing::error_of([&] { assemble_megatron_legacy(short_save.ckpt, short_save.scans, arch, found); }),
              "/ckpt/mp_rank_00/model.pt: '" + key + "' is [7, 2] on each of 2 tensor-parallel ranks, but its sections "
              "(4 + 2 + 6 + 2 + 2 rows by config.json) give each rank a 1/2 of every section: 8 rows");
}

// torch_dist's parts, listed out of order (value, query, key: sources 0, 1, 2), are joined in
// the rule's section order [query 4; key 2; value 6] before the rule renames them.
TEST(MegatronToHf, TorchDistSectionPartsJoinInSectionOrder) {
    const HfConfig config = tiny_gated_config();
    const ArchitectureInfo arch = tiny_gated_arch(config);
    const std::string x = "decoder.layers.0.self_attention.conv1d.weight";
    std::vector<std::string> notes;
    const TensorMapping out = megatron_to_hf(
        testing::mapping_of({{x + ".value", {6, 3}}, {x + ".query", {4, 3}}, {x + ".key", {2, 3}}}), arch, config, false,
        notes);
    ASSERT_EQ(out.tensors.size(), 1u);
    EXPECT_EQ(out.tensors[0].name, "model.layers.0.linear_attn.conv1d.weight");
    EXPECT_EQ(out.tensors[0].shape, (Shape{12, 3}));
    const std::vector<std::pair<int64_t, int64_t>> want{{1, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 0}, {2, 1},
                                                        {0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}};
    EXPECT_EQ(row_origins(out.tensors[0]), want);
    const std::string missing = testing::error_of([&] {
        megatron_to_hf(testing::mapping_of({{x + ".query", {4, 3}}, {x + ".value", {6, 3}}}), arch, config, false, notes);
    });
    EXPECT_TRUE(testing::contains(missing, "the checkpoint holds " + x + ".query, " + x + ".value but not " + x + ".key: "
                                           "the sections of " + x + " (rule 2 of "))
        << missing;
    // The right total split wrongly between the sections: each part is held to its own rows.
    const std::string split = testing::error_of([&] {
        megatron_to_hf(testing::mapping_of({{x + ".query", {5, 3}}, {x + ".key", {1, 3}}, {x + ".value", {6, 3}}}), arch,
                       config, false, notes);
    });
    EXPECT_TRUE(testing::contains(split, x + ".query: [5, 3], but section 'query' has 4 rows")) << split;
}

// in_proj's five parts joined, then split by groups: qkvz per group [query_g; key_g; value_g]
// and ba per group [beta_g; alpha_g], each part its own source (query 0 ... alpha 4).
TEST(MegatronToHf, TorchDistPartsOfAGroupedTensorSplitByGroup) {
    const HfConfig config = tiny_gated_config();
    const ArchitectureInfo arch = tiny_gated_arch(config);
    const std::string x = "decoder.layers.0.self_attention.in_proj.weight";
    std::vector<std::string> notes;
    const TensorMapping out = megatron_to_hf(testing::mapping_of({{x + ".query", {4, 2}}, {x + ".key", {2, 2}},
                                                                  {x + ".value", {6, 2}}, {x + ".beta", {2, 2}},
                                                                  {x + ".alpha", {2, 2}}}),
                                             arch, config, false, notes);
    ASSERT_EQ(out.tensors.size(), 2u);
    const auto find = [&](const std::string& name) -> const OutputTensor& {
        for (const auto& t : out.tensors)
            if (t.name == name) return t;
        throw std::runtime_error("no " + name);
    };
    const std::vector<std::pair<int64_t, int64_t>> qkvz{{0, 0}, {0, 1}, {1, 0}, {2, 0}, {2, 1}, {2, 2},
                                                        {0, 2}, {0, 3}, {1, 1}, {2, 3}, {2, 4}, {2, 5}};
    EXPECT_EQ(row_origins(find("model.layers.0.linear_attn.in_proj_qkvz.weight")), qkvz);
    const std::vector<std::pair<int64_t, int64_t>> ba{{3, 0}, {4, 0}, {3, 1}, {4, 1}};
    EXPECT_EQ(row_origins(find("model.layers.0.linear_attn.in_proj_ba.weight")), ba);
}

// A rule's add reaches its output as value_offset (the copy executor adds it).
TEST(MegatronToHf, AddBecomesTheValueOffset) {
    const HfConfig config = tiny_gated_config();
    const ArchitectureInfo arch = tiny_gated_arch(config);
    std::vector<std::string> notes;
    const TensorMapping out = megatron_to_hf(
        testing::mapping_of({{"decoder.layers.0.self_attention.out_norm.weight", {2}}}), arch, config, false, notes);
    ASSERT_EQ(out.tensors.size(), 1u);
    EXPECT_EQ(out.tensors[0].name, "model.layers.0.linear_attn.norm.weight");
    EXPECT_EQ(out.tensors[0].value_offset, 1.0);
}

}  // namespace
}  // namespace vmerge
