// Metadata that must state what the weights are (mapping/output_config.h): config.json's dtype
// and tie keys and its quantization_config.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "mapping/output_config.h"
#include "mapping/quantization.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::mapping_of;
using testing::tensor;
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

}  // namespace
}  // namespace vmerge
