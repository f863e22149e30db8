// Unit tests for map_checkpoint and the FSDP/DCP check against config.json
// (check_output_against_config) of src/formats/checkpoint.h, on hand-built scans.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/checkpoint.h"
#include "formats/fsdp/fsdp_backend.h"
#include "formats/registry.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::stored;
using testing::scan_of;

using testing::error_of;
using testing::contains;
// --- check_output_against_config -----------------------------------------------------------

HfConfig tiny_config(bool tied, const std::string& architecture = "LlamaForCausalLM") {
    HfConfig c;
    c.dir = "/hf";
    c.tie_word_embeddings = tied;
    c.architectures = {architecture};
    c.json = {{"architectures", c.architectures}, {"hidden_size", 4}, {"num_attention_heads", 2},
              {"num_key_value_heads", 1}, {"vocab_size", 10}, {"num_hidden_layers", 1},
              {"intermediate_size", 6}, {"tie_word_embeddings", tied}};
    return c;
}

// The tensors of a 1-layer Llama of tiny_config, listed here by hand (head_dim 2).
MappedCheckpoint tiny_llama(bool with_head) {
    MappedCheckpoint m;
    auto add = [&](const std::string& name, Shape shape) { m.mapping.tensors.push_back(testing::tensor(name, DType::F32, shape)); };
    add("model.embed_tokens.weight", {10, 4});
    add("model.layers.0.self_attn.q_proj.weight", {4, 4});
    add("model.layers.0.self_attn.k_proj.weight", {2, 4});
    add("model.layers.0.self_attn.v_proj.weight", {2, 4});
    add("model.layers.0.self_attn.o_proj.weight", {4, 4});
    add("model.layers.0.mlp.gate_proj.weight", {6, 4});
    add("model.layers.0.mlp.up_proj.weight", {6, 4});
    add("model.layers.0.mlp.down_proj.weight", {4, 6});
    add("model.layers.0.input_layernorm.weight", {4});
    add("model.layers.0.post_attention_layernorm.weight", {4});
    add("model.norm.weight", {4});
    if (with_head) add("lm_head.weight", {10, 4});
    return m;
}

// Map options with the shipped architecture tables loaded, as a merge loads them.
MapOptions shipped() {
    MapOptions options;
    options.tables = std::make_shared<const ArchitectureTables>(testing::shipped_tables());
    return options;
}

DetectedCheckpoint fsdp_layout() {
    DetectedCheckpoint d;
    d.source = find_layout("fsdp");
    return d;
}

TEST(FsdpConfigCheck, CompleteModelPassesAndTiedNeedsNoHead) {
    MappedCheckpoint untied = tiny_llama(true);
    EXPECT_NO_THROW(check_output_against_config(untied, fsdp_layout(), tiny_config(false), shipped(), false));
    MappedCheckpoint tied = tiny_llama(false);
    EXPECT_NO_THROW(check_output_against_config(tied, fsdp_layout(), tiny_config(true), shipped(), false));
}

TEST(FsdpConfigCheck, MissingHeadOfAnUntiedModelIsNamed) {
    MappedCheckpoint m = tiny_llama(false);
    const std::string msg = error_of([&] { check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false); });
    EXPECT_TRUE(contains(msg, "/hf/config.json (LlamaForCausalLM) implies:")) << msg;
    EXPECT_TRUE(contains(msg, "missing: lm_head.weight")) << msg;
}

TEST(FsdpConfigCheck, ExtraAndMisshapenTensorsAreNamed) {
    MappedCheckpoint m = tiny_llama(true);
    m.mapping.tensors.push_back(testing::tensor("model.layers.0.mlp.extra.weight", DType::F32, {2}));
    m.mapping.tensors[5].shape = {7, 4};  // gate_proj
    const std::string msg = error_of([&] { check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false); });
    EXPECT_TRUE(contains(msg, "not part of LlamaForCausalLM: model.layers.0.mlp.extra.weight")) << msg;
    EXPECT_TRUE(contains(msg, "wrong shape: model.layers.0.mlp.gate_proj.weight [7, 4] (config.json implies [6, 4])")) << msg;
}

TEST(FsdpConfigCheck, ACriticWithTheActorsCausalLmConfigIsCheckedAsAValueModel) {
    MappedCheckpoint m = tiny_llama(false);
    m.mapping.tensors.push_back(testing::tensor("score.weight", DType::F32, {1, 4}));
    EXPECT_NO_THROW(check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false));
    m.mapping.tensors.back().shape = {1, 5};
    EXPECT_TRUE(contains(error_of([&] { check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false); }),
                         "wrong shape: score.weight [1, 5] (config.json implies [1, 4])"));
}

TEST(FsdpConfigCheck, AdapterTensorsAreNotPartOfTheModel) {
    MappedCheckpoint m = tiny_llama(true);
    OutputTensor adapter = testing::tensor("base_model.model.lora_A.weight", DType::F32, {2, 4});
    adapter.adapter = true;
    m.mapping.tensors.push_back(adapter);
    EXPECT_NO_THROW(check_output_against_config(m, fsdp_layout(), tiny_config(false), shipped(), false));
}

TEST(FsdpConfigCheck, UnknownArchitectureIsNotCheckedAndSaysSo) {
    MappedCheckpoint m = tiny_llama(false);
    EXPECT_NO_THROW(check_output_against_config(m, fsdp_layout(), tiny_config(false, "FooForCausalLM"), shipped(), false));
    ASSERT_EQ(m.notes.size(), 1u);
    EXPECT_TRUE(contains(m.notes[0], "not checked against /hf/config.json: no tensor table for architecture FooForCausalLM"));
}

// --- map_checkpoint -------------------------------------------------------------------------

TEST(MapCheckpoint, FsdpBuffersAndNonTensorsAreDroppedAndCounted) {
    const std::string path = "/c/model_world_size_1_rank_0.pt";
    DetectedCheckpoint ckpt = fsdp_layout();
    FsdpCheckpoint fsdp;
    fsdp.world_size = 1;
    ckpt.keep(fsdp);
    const std::vector<ScannedFile> scans{scan_of(path,
                                                 {{"model.w", stored({2}, path, 64), 0},
                                                  {"model.layers.0.self_attn.rotary_emb.inv_freq", stored({2}, path, 128), 0},
                                                  {"model.layers.0.mlp.fc._extra_state", stored({8}, path, 192), 0}},
                                                 {{"model.version", "int"}})};
    const MappedCheckpoint m = map_checkpoint(ckpt, scans, tiny_config(false), shipped());
    ASSERT_EQ(m.mapping.tensors.size(), 1u);
    EXPECT_EQ(m.mapping.tensors[0].name, "model.w");
    EXPECT_EQ(m.account.written, 1u);
    EXPECT_EQ(m.account.dropped.at("rotary inv_freq buffer"), 1u);
    EXPECT_EQ(m.account.dropped.at("_extra_state"), 1u);
    EXPECT_EQ(m.account.dropped.at("not a tensor"), 1u);
    EXPECT_EQ(m.notes.back(), "dropped 3 source entries: 1 _extra_state, 1 not a tensor, 1 rotary inv_freq buffer");
}

}  // namespace
}  // namespace vmerge
