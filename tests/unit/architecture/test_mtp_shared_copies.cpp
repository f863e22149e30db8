// The embedding / output head copies of a multi-token prediction layer
// (architecture/mtp_shared_copies.h): which copies an MTP layer takes and under which names
// (DeepSeek-V3's release: model.layers.{L+k}.embed_tokens.weight,
// model.layers.{L+k}.shared_head.head.weight, docs/reference/model-families.md §2), that the copies
// read the original's bytes, and what config.json allows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "architecture/architecture_table.h"
#include "architecture/hf_architecture.h"
#include "architecture/mtp_shared_copies.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::contains;
using testing::error_of;
using testing::tensor;

std::vector<std::string> names_of(const TensorMapping& m) {
    std::vector<std::string> names;
    for (const auto& t : m.tensors) names.push_back(t.name);
    return names;
}

// A model with decoder layers 0 and 1 and one MTP layer 2 (V = 8, H = 4), each tensor one
// bf16 source of its own so the copies' sources can be told apart.
TensorMapping mtp_model(bool with_head = true) {
    TensorMapping m;
    auto add = [&](const std::string& name, Shape shape) {
        OutputTensor t = tensor(name, DType::BF16, shape);
        TensorRef s;
        s.dtype = DType::BF16;
        s.shape = shape;
        s.stride = contiguous_strides(shape);
        s.storage.file = name;
        s.storage.byte_size = s.nbytes();
        t.copies.push_back({static_cast<uint32_t>(m.sources.size()), Shape(shape.size(), 0), Shape(shape.size(), 0), shape});
        m.sources.push_back(s);
        m.tensors.push_back(std::move(t));
    };
    add("model.embed_tokens.weight", {8, 4});
    for (const char* layer : {"0", "1", "2"}) add(std::string("model.layers.") + layer + ".input_layernorm.weight", {4});
    add("model.layers.2.enorm.weight", {4});
    add("model.layers.2.eh_proj.weight", {4, 8});
    add("model.norm.weight", {4});
    if (with_head) add("lm_head.weight", {8, 4});
    return m;
}

TEST(MtpSharedCopies, AnMtpLayerTakesAnEmbeddingAndAHeadCopy) {
    TensorMapping m = mtp_model();
    const auto copies = set_aside_mtp_shared_copies(m);
    ASSERT_EQ(copies.size(), 2u);
    EXPECT_EQ(copies[0].name, "model.layers.2.embed_tokens.weight");
    EXPECT_FALSE(copies[0].head);
    EXPECT_EQ(copies[1].name, "model.layers.2.shared_head.head.weight");
    EXPECT_TRUE(copies[1].head);
    EXPECT_FALSE(copies[0].read || copies[1].read);
    EXPECT_EQ(m.tensors.size(), mtp_model().tensors.size());  // nothing taken out
}

TEST(MtpSharedCopies, NoMtpLayerNoCopies) {
    TensorMapping m = mtp_model();
    std::erase_if(m.tensors, [](const OutputTensor& t) { return t.name == "model.layers.2.enorm.weight"; });
    EXPECT_TRUE(set_aside_mtp_shared_copies(m).empty());
}

TEST(MtpSharedCopies, TheCheckpointsOwnCopiesAreSetAside) {
    TensorMapping m = mtp_model();
    OutputTensor carried = m.tensors[0];
    carried.name = "model.layers.2.embed_tokens.weight";
    m.tensors.push_back(carried);
    OutputTensor other_layer = m.tensors[0];
    other_layer.name = "model.layers.1.embed_tokens.weight";  // not an MTP layer: left for the config check
    m.tensors.push_back(other_layer);
    const auto copies = set_aside_mtp_shared_copies(m);
    ASSERT_EQ(copies.size(), 2u);
    ASSERT_TRUE(copies[0].read);
    EXPECT_EQ(copies[0].read->name, "model.layers.2.embed_tokens.weight");
    EXPECT_EQ(copies[0].read->copies[0].source, 0u);
    EXPECT_FALSE(copies[1].read);
    const auto names = names_of(m);
    EXPECT_EQ(std::count(names.begin(), names.end(), "model.layers.2.embed_tokens.weight"), 0);
    EXPECT_EQ(std::count(names.begin(), names.end(), "model.layers.1.embed_tokens.weight"), 1);
}

TEST(MtpSharedCopies, CopiesAreTheOriginalsUnderTheMtpLayersNames) {
    TensorMapping m = mtp_model();
    const TensorMapping before = m;
    const auto copies = set_aside_mtp_shared_copies(m);
    const auto notes = add_mtp_shared_copies(m, copies, false);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_TRUE(contains(notes[0], "2 multi-token prediction copies")) << notes[0];
    // After the last tensor of layer 2, embedding copy first.
    EXPECT_EQ(names_of(m), (std::vector<std::string>{
                               "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
                               "model.layers.1.input_layernorm.weight", "model.layers.2.input_layernorm.weight",
                               "model.layers.2.enorm.weight", "model.layers.2.eh_proj.weight",
                               "model.layers.2.embed_tokens.weight", "model.layers.2.shared_head.head.weight",
                               "model.norm.weight", "lm_head.weight"}));
    const OutputTensor& embed = m.tensors[6];
    const OutputTensor& head = m.tensors[7];
    EXPECT_EQ(embed.shape, (Shape{8, 4}));
    EXPECT_EQ(embed.dtype, DType::BF16);
    ASSERT_EQ(embed.copies.size(), 1u);
    EXPECT_EQ(m.sources[embed.copies[0].source].storage.file, "model.embed_tokens.weight");
    ASSERT_EQ(head.copies.size(), 1u);
    EXPECT_EQ(m.sources[head.copies[0].source].storage.file, "lm_head.weight");
    EXPECT_EQ(head.shape, (Shape{8, 4}));
    EXPECT_EQ(m.sources.size(), before.sources.size());  // the same bytes, read again
}

TEST(MtpSharedCopies, TiedHeadCopiesTheEmbeddingAndAModelWithoutHeadGetsNone) {
    TensorMapping tied = mtp_model(false);
    auto copies = set_aside_mtp_shared_copies(tied);
    add_mtp_shared_copies(tied, copies, true);
    const auto head = std::find_if(tied.tensors.begin(), tied.tensors.end(),
                                   [](const OutputTensor& t) { return t.name == "model.layers.2.shared_head.head.weight"; });
    ASSERT_NE(head, tied.tensors.end());
    EXPECT_EQ(tied.sources[head->copies[0].source].storage.file, "model.embed_tokens.weight");

    TensorMapping headless = mtp_model(false);  // a value model: score, no lm_head
    copies = set_aside_mtp_shared_copies(headless);
    const auto notes = add_mtp_shared_copies(headless, copies, false);
    const auto names = names_of(headless);
    EXPECT_EQ(std::count(names.begin(), names.end(), "model.layers.2.shared_head.head.weight"), 0);
    EXPECT_EQ(std::count(names.begin(), names.end(), "model.layers.2.embed_tokens.weight"), 1);
    ASSERT_EQ(notes.size(), 2u);
    EXPECT_EQ(notes[0], "model.layers.2.shared_head.head.weight not written: the output has no lm_head.weight to copy");
}

// config.json of a two-layer DeepSeek-V3 with one MTP layer (layer 2).
const char* kDeepseekConfig = R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 32,
    "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 64, "intermediate_size": 48,
    "moe_intermediate_size": 16, "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1,
    "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
    "num_nextn_predict_layers": 1})";

TEST(MtpSharedCopies, DeepseekV3ConfigAllowsTheCopiesWithTheOriginalsShape) {
    const ArchitectureInfo arch = architecture_for(parse_hf_config("/hf", kDeepseekConfig), false, false, testing::shipped_tables());
    EXPECT_TRUE(arch.mtp_shared_copies);
    EXPECT_EQ(arch.expected.optional.at("model.layers.2.embed_tokens.weight"), (Shape{64, 32}));
    EXPECT_EQ(arch.expected.optional.at("model.layers.2.shared_head.head.weight"), (Shape{64, 32}));
    EXPECT_FALSE(arch.expected.required.count("model.layers.2.embed_tokens.weight"));
    EXPECT_FALSE(arch.expected.optional.count("model.layers.1.embed_tokens.weight"));
    const ArchitectureInfo dropped = architecture_for(parse_hf_config("/hf", kDeepseekConfig), false, true, testing::shipped_tables());
    EXPECT_FALSE(dropped.expected.optional.count("model.layers.2.embed_tokens.weight"));
    const ArchitectureInfo value = architecture_for(parse_hf_config("/hf", kDeepseekConfig), true, false, testing::shipped_tables());
    EXPECT_TRUE(value.expected.optional.count("model.layers.2.embed_tokens.weight"));
    EXPECT_FALSE(value.expected.optional.count("model.layers.2.shared_head.head.weight"));
}

TEST(MtpSharedCopies, OnlyAnHfTableSaysAReleaseHoldsThem) {
    const ArchitectureInfo qwen = architecture_for(parse_hf_config("/hf", R"({"architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 16, "intermediate_size": 8,
        "num_nextn_predict_layers": 1})"),
                                                   false, false, testing::shipped_tables());
    EXPECT_FALSE(qwen.mtp_shared_copies);
    EXPECT_FALSE(qwen.expected.optional.count("model.layers.1.embed_tokens.weight"));
    auto parse = [](const std::string& body) {
        return error_of([&] {
            parse_architecture_table("t.json", nlohmann::json::parse(R"({"vmerge_architecture_table": 1, "name": "t", )" + body + "}"));
        });
    };
    EXPECT_EQ(parse(R"("source": "hf", "architectures": ["X"], "mtp_shared_copies": true)"), "");
    EXPECT_EQ(parse(R"("source": "hf", "architectures": ["X"])"),
              "t.json: a source 'hf' table needs 'tensor_set', 'rules', 'keep_fp32' or "
              "'mtp_shared_copies'");
    EXPECT_EQ(parse(R"("source": "hf", "architectures": ["X"], "mtp_shared_copies": "yes")"),
              "t.json: 'mtp_shared_copies' must be true or false");
    EXPECT_EQ(parse(R"("source": "megatron", "architectures": ["X"], "mtp_shared_copies": true, "rules": [{"from": "a", "to": "b"}])"),
              "t.json: 'mtp_shared_copies' belongs to source 'hf' tables (a fact of the HF release)");
}

}  // namespace
}  // namespace vmerge
