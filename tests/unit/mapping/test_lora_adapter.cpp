// The PEFT adapter of mapping/lora_adapter.h: extract and merge, and the alpha it takes from the
// options and the files beside the checkpoint.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "test_support.h"
#include "core/error.h"
#include "mapping/lora_adapter.h"
#include "mapping/peft_names.h"
#include "output/peft_adapter_config.h"
#include "mapping/lora_hyperparameters.h"

namespace vmerge {
namespace {

using testing::mapping_of;

using testing::TempDir;

const std::string kP = "base_model.model.";

TensorMapping peft_model() {
    return mapping_of({{kP + "model.embed_tokens.base_layer.weight", {10, 4}},
                       {kP + "model.embed_tokens.lora_embedding_A.default", {2, 10}},
                       {kP + "model.embed_tokens.lora_embedding_B.default", {4, 2}},
                       {kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                       {kP + "model.layers.0.self_attn.q_proj.base_layer.bias", {4}},
                       {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                       {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                       {kP + "model.layers.0.mlp.down_proj.base_layer.weight", {4, 6}},
                       {kP + "model.layers.0.mlp.down_proj.lora_A.default.weight", {3, 6}},
                       {kP + "model.layers.0.mlp.down_proj.lora_B.default.weight", {4, 3}},
                       {kP + "model.norm.weight", {4}},
                       {kP + "lm_head.original_module.weight", {10, 4}},
                       {kP + "lm_head.modules_to_save.default.weight", {10, 4}}});
}

LoraOptions with_alpha(LoraMode mode, double alpha) {
    LoraOptions o;
    o.mode = mode;
    o.alpha = alpha;
    o.checkpoint_dir = "/nonexistent";
    o.base_model_name_or_path = "/out";
    return o;
}

std::vector<std::string> names(const TensorMapping& m) {
    std::vector<std::string> out;
    for (const auto& t : m.tensors) out.push_back(t.name + (t.adapter ? " [adapter]" : ""));
    return out;
}

TEST(LoraAdapter, ExtractGivesCleanBaseNamesAndPeftAdapterNames) {
    TensorMapping m = peft_model();
    const LoraResult r = apply_lora(m, with_alpha(LoraMode::Extract, 16), "/ckpt");
    ASSERT_TRUE(r.found);
    EXPECT_EQ(r.modules, 3u);
    const std::vector<std::string> expected{
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.mlp.down_proj.weight", "model.norm.weight", "lm_head.weight",
        kP + "model.embed_tokens.lora_embedding_A [adapter]", kP + "model.embed_tokens.lora_embedding_B [adapter]",
        kP + "model.layers.0.self_attn.q_proj.lora_A.weight [adapter]",
        kP + "model.layers.0.self_attn.q_proj.lora_B.weight [adapter]",
        kP + "model.layers.0.mlp.down_proj.lora_A.weight [adapter]",
        kP + "model.layers.0.mlp.down_proj.lora_B.weight [adapter]", kP + "lm_head.weight [adapter]"};
    EXPECT_EQ(names(m), expected);
    // The base model keeps the frozen lm_head (source 11), the adapter carries the trained one (12).
    EXPECT_EQ(m.tensors[5].copies[0].source, 11u);
    EXPECT_EQ(m.tensors.back().copies[0].source, 12u);
    EXPECT_TRUE(m.lora_deltas.empty());
    ASSERT_TRUE(r.extracted);
    const nlohmann::json c = peft_adapter_config(*r.extracted);
    EXPECT_EQ(c["peft_type"], "LORA");
    EXPECT_EQ(c["lora_alpha"], 16);
    EXPECT_EQ(c["r"], 3);  // the largest r; q_proj and embed_tokens (r = 2) go to rank_pattern
    EXPECT_EQ(c["rank_pattern"]["model.layers.0.self_attn.q_proj"], 2);
    EXPECT_EQ(c["rank_pattern"]["model.embed_tokens"], 2);
    EXPECT_FALSE(c["rank_pattern"].contains("model.layers.0.mlp.down_proj"));
    EXPECT_EQ(c["target_modules"], nlohmann::json({"down_proj", "embed_tokens", "q_proj"}));
    // rank_pattern is set: PEFT scales per module, vLLM with one alpha/r; the user is told.
    EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
        return n.find("vLLM applies one lora_alpha/r to every module") != std::string::npos;
    }));
    EXPECT_EQ(c["modules_to_save"], nlohmann::json({"lm_head"}));
    EXPECT_EQ(c["base_model_name_or_path"], "/out");
    EXPECT_EQ(c["task_type"], "CAUSAL_LM");
    EXPECT_EQ(c["use_rslora"], false);
}

// A value model's adapter (a verl critic: score head in modules_to_save, no lm_head) must say
// TOKEN_CLS, or PeftModel.from_pretrained builds a causal-LM wrapper around the token classifier.
TensorMapping value_model() {
    return mapping_of({{kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                       {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                       {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                       {kP + "score.original_module.weight", {1, 4}},
                       {kP + "score.modules_to_save.default.weight", {1, 4}}});
}

std::string exported_task_type(TensorMapping m, const LoraOptions& o) {
    const LoraResult r = apply_lora(m, o, "/ckpt");
    return peft_adapter_config(*r.extracted)["task_type"].get<std::string>();
}

TEST(LoraAdapter, TaskTypeFollowsTheModelHeadUnlessAFileOrTheCallerSaysIt) {
    const LoraOptions plain = with_alpha(LoraMode::Extract, 8);
    EXPECT_EQ(exported_task_type(value_model(), plain), "TOKEN_CLS");
    EXPECT_EQ(exported_task_type(peft_model(), plain), "CAUSAL_LM");   // lm_head: a causal LM
    LoraOptions value = plain;
    value.task_type = "TOKEN_CLS";  // --is_value_model or a *ForTokenClassification config.json
    EXPECT_EQ(exported_task_type(peft_model(), value), "TOKEN_CLS");
    // lora_train_meta.json records the LoraConfig's task_type: it wins over the guess.
    TempDir dir;
    std::ofstream(dir.path() + "/lora_train_meta.json") << R"({"r": 2, "lora_alpha": 8, "task_type": "SEQ_CLS"})";
    LoraOptions meta = plain;
    meta.checkpoint_dir = dir.path();
    EXPECT_EQ(exported_task_type(value_model(), meta), "SEQ_CLS");
}

// HF Trainer under DeepSpeed leaves frozen parameters out, original_module included: the base
// model's own score.weight (--lora_base) stands for it, in the base folder (export) and as the
// tensor the trained copy replaces (fold).
TensorMapping value_model_without_original() {
    return mapping_of({{"model.layers.0.self_attn.q_proj.weight", {4, 4}},
                       {"score.weight", {1, 4}},
                       {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                       {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                       {kP + "score.modules_to_save.default.weight", {1, 4}}});
}

TEST(LoraAdapter, ModulesToSaveWithoutOriginalUsesTheBaseTensor) {
    TensorMapping extract = value_model_without_original();
    apply_lora(extract, with_alpha(LoraMode::Extract, 8), "/ckpt");
    EXPECT_EQ(names(extract), (std::vector<std::string>{
                                  "model.layers.0.self_attn.q_proj.weight", "score.weight",
                                  kP + "model.layers.0.self_attn.q_proj.lora_A.weight [adapter]",
                                  kP + "model.layers.0.self_attn.q_proj.lora_B.weight [adapter]",
                                  kP + "score.weight [adapter]"}));
    EXPECT_EQ(extract.tensors[1].copies[0].source, 1u);     // the base's head
    EXPECT_EQ(extract.tensors.back().copies[0].source, 4u); // the trained copy
    TensorMapping merge = value_model_without_original();
    apply_lora(merge, with_alpha(LoraMode::Merge, 8), "/ckpt");
    ASSERT_EQ(merge.tensors.size(), 2u);
    EXPECT_EQ(merge.tensors[1].name, "score.weight");
    EXPECT_EQ(merge.tensors[1].copies[0].source, 4u);
    // Neither an original_module copy nor a base tensor: nothing to put in the base folder.
    TensorMapping orphan = mapping_of({{kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                                       {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                                       {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                                       {kP + "score.modules_to_save.default.weight", {1, 4}}});
    EXPECT_THROW(apply_lora(orphan, with_alpha(LoraMode::Extract, 8), "/ckpt"), Error);
}

TEST(LoraAdapter, MergeAttachesDeltasWithAlphaOverRAndReplacesModulesToSave) {
    TensorMapping m = peft_model();
    LoraOptions o = with_alpha(LoraMode::Merge, 12);
    apply_lora(m, o, "/ckpt");
    ASSERT_EQ(m.tensors.size(), 6u);
    ASSERT_EQ(m.lora_deltas.size(), 3u);
    EXPECT_EQ(m.tensors[0].name, "model.embed_tokens.weight");
    ASSERT_TRUE(m.tensors[0].lora_delta);
    const LoraDelta& emb = m.lora_deltas[*m.tensors[0].lora_delta];
    EXPECT_TRUE(emb.transposed);
    EXPECT_DOUBLE_EQ(emb.scale, 6.0);  // 12 / 2
    const LoraDelta& down = m.lora_deltas[*m.tensors[3].lora_delta];
    EXPECT_FALSE(down.transposed);
    EXPECT_DOUBLE_EQ(down.scale, 4.0);  // 12 / 3
    EXPECT_FALSE(m.tensors[2].lora_delta);  // the bias
    EXPECT_EQ(m.tensors[5].name, "lm_head.weight");
    EXPECT_EQ(m.tensors[5].copies[0].source, 12u);  // the trained copy
    for (const auto& t : m.tensors) EXPECT_FALSE(t.adapter);

    TensorMapping rs = peft_model();
    o.use_rslora = true;
    apply_lora(rs, o, "/ckpt");
    EXPECT_DOUBLE_EQ(rs.lora_deltas[*rs.tensors[3].lora_delta].scale, 12.0 / std::sqrt(3.0));
}

TEST(LoraAdapter, NoPeftNamesLeavesTheMappingAlone) {
    TensorMapping m = mapping_of({{"model.layers.0.self_attn.q_proj.weight", {4, 4}}});
    EXPECT_FALSE(apply_lora(m, with_alpha(LoraMode::Merge, 8), "/ckpt").found);
    EXPECT_EQ(m.tensors[0].name, "model.layers.0.self_attn.q_proj.weight");
}

void expect_error(TensorMapping m, const LoraOptions& o, const std::string& needle) {
    try {
        apply_lora(m, o, "/ckpt");
        FAIL() << "expected an error naming " << needle;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

TEST(LoraAdapter, RefusesWhatAPlainMergeWouldGetWrong) {
    const auto o = with_alpha(LoraMode::Merge, 8);
    auto dora = peft_model();
    auto extra = mapping_of({{kP + "model.layers.0.self_attn.q_proj.lora_magnitude_vector.default.weight", {4}}});
    dora.tensors.push_back(extra.tensors[0]);
    dora.sources.push_back(extra.sources[0]);
    dora.tensors.back().copies[0].source = static_cast<uint32_t>(dora.sources.size() - 1);
    expect_error(dora, o, "DoRA");
    expect_error(mapping_of({{kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_B.default.bias", {4}}}),
                 o, "lora_bias");
    expect_error(mapping_of({{kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                             {kP + "model.layers.0.self_attn.k_proj.base_layer.weight", {4, 4}},
                             {kP + "model.layers.0.self_attn.k_proj.lora_A.other.weight", {2, 4}},
                             {kP + "model.layers.0.self_attn.k_proj.lora_B.other.weight", {4, 2}}}),
                 o, "several LoRA adapters");
    expect_error(mapping_of({{kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}}}),
                 o, "has lora_A but no lora_B");
    expect_error(mapping_of({{kP + "model.layers.0.self_attn.q_proj.base_layer.weight", {4, 5}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}}}),
                 o, "but the weight is [4, 5]");
    expect_error(mapping_of({{kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                             {kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}}}),
                 o, "no base weight 'model.layers.0.self_attn.q_proj.weight'");
}

// PEFT 0.21.2's target_parameters on transformers 5's fused experts (names as a real PeftModel
// of Qwen3MoeForCausalLM holds them): one ParamWrapper per targeted parameter, stacked, so the
// module has factors but no 2-D weight; the error names a parameter it wraps and says why.
TEST(LoraAdapter, RefusesAnAdapterOnAParameterOtherThanTheWeightByName) {
    const std::string e = kP + "model.layers.0.mlp.experts.";
    expect_error(mapping_of({{e + "base_layer.base_layer.gate_up_proj", {4, 48, 64}},
                             {e + "base_layer.base_layer.down_proj", {4, 64, 24}},
                             {e + "base_layer.lora_A.default.weight", {16, 64}},
                             {e + "base_layer.lora_B.default.weight", {48, 16}},
                             {e + "lora_A.default.weight", {16, 24}},
                             {e + "lora_B.default.weight", {64, 16}}}),
                 with_alpha(LoraMode::Merge, 8),
                 "module 'model.layers.0.mlp.experts' has a LoRA adapter on a parameter other than its weight "
                 "(PEFT's target_parameters); it wraps '" + e + "base_layer.base_layer.down_proj'");
}

// A checkpoint that records alpha nowhere by design (Megatron-Bridge shards) says why, and a
// file found beside it or --lora_alpha still wins.
TEST(LoraAdapter, AlphaRecordedNowhereSaysWhyAndAsksForTheFlag) {
    LoraOptions o;
    o.checkpoint_dir = "/ckpt/actor";
    o.metadata = LoraMetadataFiles{};  // nothing found on disk
    o.alpha_unrecorded = "/ckpt/actor/model/dist_ckpt holds adapter shards, which record no LoRA alpha";
    expect_error(peft_model(), o, "/ckpt: LoRA adapter on");
    expect_error(peft_model(), o, "which record no LoRA alpha; pass --lora_alpha");
    o.alpha = 24;
    EXPECT_EQ(resolve_lora_hyperparameters(o, "x").alpha, 24);
}

TEST(LoraAdapter, AlphaComesFromTheCheckpointOrIsAnError) {
    TempDir dir;
    LoraOptions o;
    o.checkpoint_dir = dir.path() + "/actor";
    std::filesystem::create_directories(o.checkpoint_dir + "/lora_adapter");
    expect_error(peft_model(), o, "pass --lora_alpha");
    std::ofstream(dir.path() + "/lora_train_meta.json") << R"({"r": 3, "lora_alpha": 32, "task_type": "CAUSAL_LM"})";
    auto h = resolve_lora_hyperparameters(o, "x");
    EXPECT_EQ(h.alpha, 32);
    EXPECT_EQ(h.source, dir.path() + "/lora_train_meta.json");
    std::ofstream(o.checkpoint_dir + "/lora_adapter/adapter_config.json")
        << R"({"peft_type": "LORA", "r": 3, "lora_alpha": 64, "use_rslora": true})";
    expect_error(peft_model(), o, "lora_alpha disagrees: 64 in");
    o.alpha = 8;
    h = resolve_lora_hyperparameters(o, "x");
    EXPECT_EQ(h.alpha, 8);
    EXPECT_TRUE(h.use_rslora);
    ASSERT_EQ(h.notes.size(), 1u);
    std::ofstream(o.checkpoint_dir + "/lora_adapter/adapter_config.json") << R"({"peft_type": "LORA", "lora_alpha": 0})";
    o.alpha.reset();
    std::filesystem::remove(dir.path() + "/lora_train_meta.json");
    expect_error(peft_model(), o, "the adapter would change nothing");
    std::ofstream(o.checkpoint_dir + "/lora_adapter/adapter_config.json") << R"({"peft_type": "LORA", "lora_alpha": 8, "use_dora": true})";
    expect_error(peft_model(), o, "'use_dora' is true");
}

}  // namespace
}  // namespace vmerge
