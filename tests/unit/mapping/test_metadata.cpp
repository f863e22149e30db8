// Metadata that must state what the weights are: config.json's dtype and tie keys, the
// quantization `ignore` list and the vLLM kernel rules, MoE experts quantized alike, PEFT
// target_modules, a tied head that is really the embedding, and test's cast comparison.
#include <gtest/gtest.h>

#include <cstring>

#include "test_support.h"
#include "core/error.h"
#include "mapping/lora_adapter.h"
#include "mapping/peft_names.h"
#include "mapping/output_config.h"
#include "mapping/quantization.h"
#include "exec/reference_compare.h"
#include "exec/tied_embedding.h"

namespace vmerge {
namespace {
using testing::tensor;

TensorMapping mapping_of(std::vector<OutputTensor> tensors) {
    TensorMapping m;
    m.tensors = std::move(tensors);
    return m;
}

const char* kBf16Config = R"({"vocab_size": 8, "torch_dtype": "bfloat16", "tie_word_embeddings": false})";

TEST(OutputConfig, Fp32WeightsRewriteTorchDtypeAndKeepKeyOrder) {
    const auto m = mapping_of({tensor("model.norm.weight", DType::F32, {4}), tensor("x.bias", DType::I64, {2})});
    const OutputConfig c = plan_output_config("src/config.json", kBf16Config, m, false, nullptr);
    ASSERT_TRUE(c.text);
    EXPECT_EQ(*c.text, "{\n  \"vocab_size\": 8,\n  \"torch_dtype\": \"float32\",\n  \"tie_word_embeddings\": false\n}\n");
    ASSERT_EQ(c.notes.size(), 1u);
    EXPECT_NE(c.notes[0].find("torch_dtype 'bfloat16' -> 'float32'"), std::string::npos);
}

TEST(OutputConfig, NothingChangedMeansTheSourceIsCopied) {
    const auto m = mapping_of({tensor("model.norm.weight", DType::BF16, {4})});
    EXPECT_FALSE(plan_output_config("c", kBf16Config, m, false, nullptr).text);
    // Mixed float dtypes: no single dtype to state, the source's stays.
    const auto mixed = mapping_of({tensor("a", DType::BF16, {4}), tensor("b", DType::F32, {4})});
    EXPECT_FALSE(plan_output_config("c", kBf16Config, mixed, false, nullptr).text);
    // An adapter's tensors are not the model's.
    auto adapter = tensor("lora", DType::F32, {4});
    adapter.adapter = true;
    const auto with_adapter = mapping_of({tensor("a", DType::BF16, {4}), adapter});
    EXPECT_FALSE(plan_output_config("c", kBf16Config, with_adapter, false, nullptr).text);
}

TEST(OutputConfig, TransformersFiveDtypeKeyAndTextConfigAreRewritten) {
    const auto m = mapping_of({tensor("w", DType::F16, {4})});
    const char* source = R"({"dtype": "bfloat16", "text_config": {"torch_dtype": "torch.bfloat16", "dtype": "float16"}})";
    const OutputConfig c = plan_output_config("c", source, m, false, nullptr);
    ASSERT_TRUE(c.text);
    const auto j = nlohmann::json::parse(*c.text);
    EXPECT_EQ(j["dtype"], "float16");
    EXPECT_EQ(j["text_config"]["torch_dtype"], "float16");
    EXPECT_EQ(j["text_config"]["dtype"], "float16");
    EXPECT_FALSE(j.contains("torch_dtype"));  // a key the source lacks stays absent
    EXPECT_EQ(c.notes.size(), 2u);
}

TEST(OutputConfig, TieFlagAndQuantizationConfigAreStated) {
    const auto m = mapping_of({tensor("w", DType::BF16, {4})});
    const nlohmann::ordered_json q = {{"quant_method", "compressed-tensors"}};
    const OutputConfig c = plan_output_config("c", kBf16Config, m, true, q);
    ASSERT_TRUE(c.text);
    const auto j = nlohmann::json::parse(*c.text);
    EXPECT_EQ(j["tie_word_embeddings"], true);
    EXPECT_EQ(j["quantization_config"]["quant_method"], "compressed-tensors");
    EXPECT_THROW(plan_output_config("c", "[1]", m, false, nullptr), Error);
}

TEST(Quantization, KernelRulesRefuseGroupSizesNoVllmKernelRuns) {
    QuantizeSpec spec;
    for (int64_t g : {0, 32, 64, 128}) {
        spec.group_size = g;
        EXPECT_EQ(unsupported_by_vllm(spec), "") << g;
    }
    for (int64_t g : {16, 48, 96, 256}) {
        spec.group_size = g;
        EXPECT_NE(unsupported_by_vllm(spec).find("--group_size " + std::to_string(g)), std::string::npos);
        auto m = mapping_of({tensor("model.layers.0.mlp.up_proj.weight", DType::BF16, {4, 768})});
        EXPECT_THROW(plan_quantization(m, spec), Error);
        spec.allow_unsupported = true;
        auto ok = mapping_of({tensor("model.layers.0.mlp.up_proj.weight", DType::BF16, {4, 768})});
        EXPECT_FALSE(plan_quantization(ok, spec).notes.empty());
        spec.allow_unsupported = false;
    }
}

TEST(Quantization, EveryUnquantizedLinearIsIgnoredScoreToo) {
    QuantizeSpec spec;
    spec.group_size = 32;
    auto m = mapping_of({tensor("model.embed_tokens.weight", DType::BF16, {10, 64}),
                         tensor("model.layers.0.self_attn.q_proj.weight", DType::BF16, {64, 64}),
                         tensor("model.layers.0.mlp.down_proj.weight", DType::BF16, {64, 48}),  // 48 % 32 != 0
                         tensor("model.norm.weight", DType::BF16, {64}), tensor("score.weight", DType::BF16, {1, 64})});
    const QuantizationPlan plan = plan_quantization(m, spec);
    EXPECT_EQ(plan.ignored_modules, (std::vector<std::string>{"lm_head", "model.layers.0.mlp.down_proj", "score"}));
}

TEST(Quantization, ExpertsOfOneMoeLayerMustBeQuantizedAlike) {
    QuantizeSpec spec;
    spec.group_size = 0;
    auto experts = [] {
        std::vector<OutputTensor> t;
        for (int e = 0; e < 3; ++e)
            for (const char* p : {"gate_proj", "down_proj"})
                t.push_back(tensor("model.layers.2.mlp.experts." + std::to_string(e) + "." + p + ".weight", DType::BF16, {8, 8}));
        return mapping_of(std::move(t));
    };
    auto alike = experts();
    spec.ignore = {"re:.*experts\\.\\d+\\.down_proj"};  // every expert's down_proj: alike
    EXPECT_NO_THROW(plan_quantization(alike, spec));
    auto uneven = experts();
    spec.ignore = {"model.layers.2.mlp.experts.1.gate_proj"};
    try {
        plan_quantization(uneven, spec);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("MoE layer model.layers.2.mlp.experts: expert "
                                             "model.layers.2.mlp.experts.0.gate_proj is quantized but "
                                             "model.layers.2.mlp.experts.1.gate_proj is not"),
                  std::string::npos)
            << e.what();
    }
}

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

TEST(ReferenceCompare, NarrowerDtypeAndRoundToNearestEven) {
    EXPECT_EQ(comparison_dtype(DType::F32, DType::BF16), DType::BF16);
    EXPECT_EQ(comparison_dtype(DType::BF16, DType::F32), DType::BF16);
    EXPECT_EQ(comparison_dtype(DType::F16, DType::BF16), DType::F16);
    EXPECT_EQ(comparison_dtype(DType::I64, DType::I64), DType::I64);
    EXPECT_FALSE(comparison_dtype(DType::I64, DType::F32));
    // fp32 1.0, 1 + 2^-8 (a tie: to even 0x3F80), 1 + 3·2^-8 (a tie: to even 0x3F82) and bf16 by hand.
    const uint32_t merged[3] = {0x3F800000u, 0x3F808000u, 0x3F818000u};
    const uint16_t reference[3] = {0x3F80, 0x3F80, 0x3F82};
    CastComparison compare;
    size_t bad = 99;
    EXPECT_TRUE(compare.match(reinterpret_cast<const unsigned char*>(merged), DType::F32,
                              reinterpret_cast<const unsigned char*>(reference), DType::BF16, DType::BF16, 3, 0, 0, &bad));
    const uint16_t off[3] = {0x3F80, 0x3F81, 0x3F82};
    EXPECT_FALSE(compare.match(reinterpret_cast<const unsigned char*>(merged), DType::F32,
                               reinterpret_cast<const unsigned char*>(off), DType::BF16, DType::BF16, 3, 0, 0, &bad));
    EXPECT_EQ(bad, 1u);
}

OutputTensor constant(const std::string& name, std::vector<float> values, Shape shape) {
    OutputTensor t = tensor(name, DType::F32, std::move(shape));
    t.role = OutputTensor::Role::Constant;
    t.constant.resize(values.size() * 4);
    std::memcpy(t.constant.data(), values.data(), t.constant.size());
    return t;
}

TEST(TiedHead, TrainedHeadIsNeverDropped) {
    HfConfig untied;
    untied.dir = "/hf";
    const std::vector<float> emb{1, 2, 3, 4, 5, 6};
    auto same = mapping_of({constant("model.embed_tokens.weight", emb, {3, 2}), constant("lm_head.weight", emb, {3, 2})});
    for (int rank = 0; rank < 2; ++rank) EXPECT_NO_THROW(check_tied_head(same, untied, true, 64, rank, 2));
    auto differs = mapping_of({constant("model.embed_tokens.weight", emb, {3, 2}),
                               constant("lm_head.weight", {1, 2, 3, 4, 5, 7}, {3, 2})});
    EXPECT_NO_THROW(check_tied_head(differs, untied, false, 64, 0, 1));  // not tied: nothing to check
    EXPECT_NO_THROW(check_tied_head(differs, untied, true, 64, 0, 2));   // rank 0 holds rows 0..1
    try {
        check_tied_head(differs, untied, true, 16, 1, 2);  // rows 1..2, one row per block
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("lm_head.weight differs from model.embed_tokens.weight (first at row 2)"),
                  std::string::npos)
            << e.what();
    }
    HfConfig tied = untied;
    tied.tie_word_embeddings = true;
    EXPECT_THROW(check_tied_head(differs, tied, false, 64, 0, 1), Error);
    auto no_embedding = mapping_of({constant("lm_head.weight", emb, {3, 2})});
    EXPECT_THROW(check_tied_head(no_embedding, tied, false, 64, 0, 1), Error);
    auto other_shape = mapping_of({constant("model.embed_tokens.weight", emb, {2, 3}), constant("lm_head.weight", emb, {3, 2})});
    EXPECT_THROW(check_tied_head(other_shape, tied, false, 64, 0, 1), Error);
}

}  // namespace
}  // namespace vmerge
