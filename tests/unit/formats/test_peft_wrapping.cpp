// A PEFT-wrapped state dict renamed by an architecture table's saved-name rules
// (formats/peft_wrapping.h, apply_saved_names in formats/table_mapping.h), then taken apart by
// apply_lora (mapping/lora_adapter.h): the names are PEFT 0.21.2's for a transformers 5
// Qwen2_5_VLForConditionalGeneration (PeftModel.state_dict(), seen with the real PEFT:
// tests/ecosystem gen_families.py qwen2_5_vl_lora), and what each output must carry is what
// transformers' save_pretrained writes (model.layers.*, visual.*) for the model and what PEFT's
// own save_pretrained writes (the run-time names) for the adapter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/hf_config.h"
#include "core/error.h"
#include "formats/peft_wrapping.h"
#include "formats/source_ledger.h"
#include "formats/table_mapping.h"
#include "mapping/lora_adapter.h"
#include "output/peft_adapter_config.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::mapping_of;

const std::string kP = "base_model.model.";

TEST(PeftWrapping, EachPeftKindIsSeenAsTheModelTensorItStandsFor) {
    struct Case {
        std::string name, model, module, rewrapped;
    };
    const std::vector<Case> cases{
        {kP + "model.language_model.layers.0.self_attn.q_proj.base_layer.weight",
         "model.language_model.layers.0.self_attn.q_proj.weight", "model.language_model.layers.0.self_attn.q_proj",
         kP + "model.layers.0.self_attn.q_proj.base_layer.weight"},
        {kP + "model.language_model.layers.0.self_attn.q_proj.base_layer.bias",
         "model.language_model.layers.0.self_attn.q_proj.bias", "model.language_model.layers.0.self_attn.q_proj",
         kP + "model.layers.0.self_attn.q_proj.base_layer.bias"},
        // The factors stand for the weight they adapt.
        {kP + "model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight",
         "model.language_model.layers.0.self_attn.q_proj.weight", "model.language_model.layers.0.self_attn.q_proj",
         kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight"},
        {kP + "model.language_model.embed_tokens.lora_embedding_B.default", "model.language_model.embed_tokens.weight",
         "model.language_model.embed_tokens", kP + "model.embed_tokens.lora_embedding_B.default"},
        {kP + "model.language_model.score.modules_to_save.default.weight", "model.language_model.score.weight",
         "model.language_model.score", kP + "model.score.modules_to_save.default.weight"},
        {kP + "model.language_model.score.original_module.bias", "model.language_model.score.bias",
         "model.language_model.score", kP + "model.score.original_module.bias"},
        // Not adapted: only PEFT's prefix.
        {kP + "model.language_model.norm.weight", "model.language_model.norm.weight", "model.language_model.norm",
         kP + "model.norm.weight"},
        // Not PEFT at all: the name is the model's.
        {"model.language_model.norm.weight", "model.language_model.norm.weight", "model.language_model.norm",
         "model.norm.weight"},
    };
    for (const Case& c : cases) {
        const PeftWrapping w = peft_wrapping(c.name);
        EXPECT_EQ(w.model_name(), c.model) << c.name;
        EXPECT_EQ(w.module(), c.module) << c.name;
        const std::string renamed = "model." + c.model.substr(std::string("model.language_model.").size());
        EXPECT_EQ(w.rewrapped(renamed), c.rewrapped) << c.name;
    }
    // A rule that renames the parameter itself cannot be followed inside the wrapping.
    EXPECT_EQ(peft_wrapping(kP + "m.q_proj.base_layer.weight").rewrapped("m.q_proj.kernel"), std::nullopt);
    EXPECT_EQ(peft_wrapping(kP + "m.q_proj.lora_B.default.weight").rewrapped("m.q_proj.kernel"), std::nullopt);
}

// The state dict of a PeftModel on a Qwen2.5-VL: LoRA on the language model's q_proj and on one
// vision block's qkv, the other tensors under PEFT's prefix with transformers 5's run-time names.
TensorMapping peft_qwen2_5_vl() {
    return mapping_of({{kP + "model.visual.blocks.0.attn.qkv.base_layer.weight", {6, 2}},
                       {kP + "model.visual.blocks.0.attn.qkv.base_layer.bias", {6}},
                       {kP + "model.visual.blocks.0.attn.qkv.lora_A.default.weight", {2, 2}},
                       {kP + "model.visual.blocks.0.attn.qkv.lora_B.default.weight", {6, 2}},
                       {kP + "model.visual.blocks.1.attn.qkv.weight", {6, 2}},
                       {kP + "model.language_model.embed_tokens.weight", {10, 4}},
                       {kP + "model.language_model.layers.0.self_attn.q_proj.base_layer.weight", {4, 4}},
                       {kP + "model.language_model.layers.0.self_attn.q_proj.lora_A.default.weight", {2, 4}},
                       {kP + "model.language_model.layers.0.self_attn.q_proj.lora_B.default.weight", {4, 2}},
                       {kP + "model.language_model.norm.weight", {4}},
                       {kP + "lm_head.weight", {10, 4}}});
}

// apply_saved_names with the shipped Qwen2.5-VL table, as map_checkpoint runs it.
TensorMapping named_as_saved(TensorMapping m) {
    const ArchitectureTable* table =
        find_architecture_table(testing::shipped_tables(), "hf", "Qwen2_5_VLForConditionalGeneration");
    EXPECT_NE(table, nullptr);
    HfConfig config;
    config.architectures = {"Qwen2_5_VLForConditionalGeneration"};
    const std::vector<ScannedFile> scans;
    SourceLedger ledger(scans);
    std::vector<std::string> notes;
    apply_saved_names(m, *table, config, ledger, notes);
    return m;
}

LoraOptions lora_options(LoraMode mode) {
    LoraOptions o;
    o.mode = mode;
    o.alpha = 8;
    o.checkpoint_dir = "/nonexistent";
    o.base_model_name_or_path = "/out";
    return o;
}

std::vector<std::string> names_of(const TensorMapping& m) {
    std::vector<std::string> out;
    for (const auto& t : m.tensors) out.push_back(t.name + (t.adapter ? " [adapter]" : ""));
    return out;
}

TEST(PeftSavedNames, RulesRenameInsideTheWrappingAndKeepTheRunTimeModulePaths) {
    const TensorMapping m = named_as_saved(peft_qwen2_5_vl());
    const std::vector<std::string> expected{
        kP + "visual.blocks.0.attn.qkv.base_layer.weight", kP + "visual.blocks.0.attn.qkv.base_layer.bias",
        kP + "visual.blocks.0.attn.qkv.lora_A.default.weight", kP + "visual.blocks.0.attn.qkv.lora_B.default.weight",
        kP + "visual.blocks.1.attn.qkv.weight", kP + "model.embed_tokens.weight",
        kP + "model.layers.0.self_attn.q_proj.base_layer.weight", kP + "model.layers.0.self_attn.q_proj.lora_A.default.weight",
        kP + "model.layers.0.self_attn.q_proj.lora_B.default.weight", kP + "model.norm.weight", kP + "lm_head.weight"};
    EXPECT_EQ(names_of(m), expected);
    EXPECT_EQ(m.peft_run_time_modules.at("visual.blocks.0.attn.qkv"), "model.visual.blocks.0.attn.qkv");
    EXPECT_EQ(m.peft_run_time_modules.at("model.layers.0.self_attn.q_proj"), "model.language_model.layers.0.self_attn.q_proj");
    EXPECT_EQ(m.peft_run_time_modules.count("lm_head"), 0u);  // no rule renames it
}

TEST(PeftSavedNames, FoldWritesSavedNamesWithEveryDeltaOnItsWeight) {
    TensorMapping m = named_as_saved(peft_qwen2_5_vl());
    apply_lora(m, lora_options(LoraMode::Merge), "/ckpt");
    const std::vector<std::string> expected{"visual.blocks.0.attn.qkv.weight", "visual.blocks.0.attn.qkv.bias",
                                            "visual.blocks.1.attn.qkv.weight", "model.embed_tokens.weight",
                                            "model.layers.0.self_attn.q_proj.weight", "model.norm.weight",
                                            "lm_head.weight"};
    EXPECT_EQ(names_of(m), expected);
    ASSERT_EQ(m.lora_deltas.size(), 2u);
    ASSERT_TRUE(m.tensors[0].lora_delta && m.tensors[4].lora_delta);
    // Each delta holds its own module's factors (sources 2/3: vision qkv; 7/8: q_proj), scale alpha/r = 8/2.
    EXPECT_EQ(m.lora_deltas[*m.tensors[0].lora_delta].a.copies[0].source, 2u);
    EXPECT_EQ(m.lora_deltas[*m.tensors[4].lora_delta].b.copies[0].source, 8u);
    EXPECT_EQ(m.lora_deltas[*m.tensors[4].lora_delta].scale, 4.0);
    EXPECT_FALSE(m.tensors[1].lora_delta || m.tensors[2].lora_delta);
}

TEST(PeftSavedNames, ExportedAdapterCarriesTheRunTimeNamesPeftSaves) {
    TensorMapping m = named_as_saved(peft_qwen2_5_vl());
    const LoraResult r = apply_lora(m, lora_options(LoraMode::Extract), "/ckpt");
    const std::vector<std::string> expected{
        "visual.blocks.0.attn.qkv.weight", "visual.blocks.0.attn.qkv.bias", "visual.blocks.1.attn.qkv.weight",
        "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight", "lm_head.weight",
        kP + "model.visual.blocks.0.attn.qkv.lora_A.weight [adapter]",
        kP + "model.visual.blocks.0.attn.qkv.lora_B.weight [adapter]",
        kP + "model.language_model.layers.0.self_attn.q_proj.lora_A.weight [adapter]",
        kP + "model.language_model.layers.0.self_attn.q_proj.lora_B.weight [adapter]"};
    EXPECT_EQ(names_of(m), expected);
    ASSERT_TRUE(r.extracted);
    // q_proj: every q_proj has an adapter, so its leaf; qkv: block 1 has none, so block 0's full
    // run-time path, the module PEFT builds the adapter on.
    EXPECT_EQ(r.extracted->target_modules, (std::vector<std::string>{"model.visual.blocks.0.attn.qkv", "q_proj"}));
}

// One contiguous 3-D tensor [experts, rows, cols] of one source.
TensorMapping fused_experts(const std::string& name, Shape shape) {
    TensorMapping m = mapping_of({{name, shape}});
    m.sources[0].stride = contiguous_strides(shape);
    return m;
}

// Qwen3-MoE's saved-name rules (they split transformers 5's fused experts into one tensor per
// expert) applied to `m`; the error they give, "" when none.
std::string named_as_saved_qwen3_moe(TensorMapping& m) {
    const ArchitectureTable* table = find_architecture_table(testing::shipped_tables(), "hf", "Qwen3MoeForCausalLM");
    EXPECT_NE(table, nullptr);
    HfConfig config;
    config.architectures = {"Qwen3MoeForCausalLM"};
    const std::vector<ScannedFile> scans;
    SourceLedger ledger(scans);
    std::vector<std::string> notes;
    return testing::error_of([&] { apply_saved_names(m, *table, config, ledger, notes); });
}

TEST(PeftSavedNames, UnadaptedFusedExpertsAreSplitUnderPeftsPrefix) {
    TensorMapping m = fused_experts(kP + "model.layers.0.mlp.experts.down_proj", {2, 4, 6});
    EXPECT_EQ(named_as_saved_qwen3_moe(m), "");
    EXPECT_EQ(names_of(m), (std::vector<std::string>{kP + "model.layers.0.mlp.experts.0.down_proj.weight",
                                                     kP + "model.layers.0.mlp.experts.1.down_proj.weight"}));
}

TEST(PeftSavedNames, RegroupingAWrappedTensorIsRefused) {
    // An adapter on the fused experts (PEFT's wrapper around the experts module): its base
    // cannot be split into per-expert weights while its factors stay whole.
    TensorMapping m = fused_experts(kP + "model.layers.0.mlp.experts.base_layer.down_proj", {2, 4, 6});
    const std::string error = named_as_saved_qwen3_moe(m);
    EXPECT_TRUE(testing::contains(error, kP + "model.layers.0.mlp.experts.base_layer.down_proj")) << error;
    EXPECT_TRUE(testing::contains(error, "cannot be regrouped")) << error;
}

}  // namespace
}  // namespace vmerge
