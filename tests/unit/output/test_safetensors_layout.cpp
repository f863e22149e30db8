// Unit tests for src/output/safetensors/safetensors_layout.h: safetensors headers and the index JSON.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "output/safetensors/safetensors_layout.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::tensor;

uint64_t le64(const std::string& bytes) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    return n;
}

// --- safetensors_header ------------------------------------------------------------------

TEST(SafetensorsHeader, LengthPrefixMetadataAndPadding) {
    const OutputTensor a = tensor("a", DType::F32, {2, 3});   // 24 bytes
    const OutputTensor b = tensor("b.weight", DType::BF16, {5});  // 10 bytes
    const std::string h = safetensors_header({&a, &b});
    ASSERT_GE(h.size(), 8u);
    const uint64_t n = le64(h);
    EXPECT_EQ(n, h.size() - 8);
    EXPECT_EQ(n % 8, 0u);
    const std::string json = h.substr(8);
    EXPECT_EQ(json.rfind(R"({"__metadata__":{"format":"pt"})", 0), 0u) << json;
    // Padding is spaces only, after the closing brace.
    const size_t close = json.find_last_of('}');
    ASSERT_NE(close, std::string::npos);
    EXPECT_EQ(json.find_first_not_of(' ', close + 1), std::string::npos);
    EXPECT_LT(json.size() - close - 1, 8u);

    const auto parsed = nlohmann::json::parse(json);
    EXPECT_EQ(parsed["__metadata__"], nlohmann::json({{"format", "pt"}}));
    EXPECT_EQ(parsed["a"]["dtype"], "F32");
    EXPECT_EQ(parsed["a"]["shape"], nlohmann::json({2, 3}));
    EXPECT_EQ(parsed["a"]["data_offsets"], nlohmann::json({0, 24}));
    EXPECT_EQ(parsed["b.weight"]["dtype"], "BF16");
    EXPECT_EQ(parsed["b.weight"]["shape"], nlohmann::json({5}));
    EXPECT_EQ(parsed["b.weight"]["data_offsets"], nlohmann::json({24, 34}));
    EXPECT_EQ(parsed.size(), 3u);
    // Tensors appear in data order in the text.
    EXPECT_LT(json.find("\"a\""), json.find("\"b.weight\""));
}

TEST(SafetensorsHeader, ExactBytesForOneTensor) {
    const OutputTensor a = tensor("w", DType::F16, {3, 1});
    const std::string body =
        R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[3,1],"data_offsets":[0,6]}})";
    std::string padded = body;
    while (padded.size() % 8) padded += ' ';
    std::string expected(8, '\0');
    for (int i = 0; i < 8; ++i) expected[i] = static_cast<char>((padded.size() >> (8 * i)) & 0xFF);
    expected += padded;
    EXPECT_EQ(safetensors_header({&a}), expected);
}

TEST(SafetensorsHeader, ScalarsEmptyTensorsAndEscapedNames) {
    const OutputTensor s = tensor("scalar", DType::F64, {});        // 8 bytes
    const OutputTensor e = tensor("empty", DType::F32, {0, 4});     // 0 bytes
    const OutputTensor q = tensor("we\"ird\\name", DType::I64, {1}); // 8 bytes
    const std::string h = safetensors_header({&s, &e, &q});
    const auto parsed = nlohmann::json::parse(h.substr(8));
    EXPECT_EQ(parsed["scalar"]["shape"], nlohmann::json::array());
    EXPECT_EQ(parsed["scalar"]["data_offsets"], nlohmann::json({0, 8}));
    EXPECT_EQ(parsed["empty"]["shape"], nlohmann::json({0, 4}));
    EXPECT_EQ(parsed["empty"]["data_offsets"], nlohmann::json({8, 8}));
    EXPECT_EQ(parsed["we\"ird\\name"]["dtype"], "I64");
    EXPECT_EQ(parsed["we\"ird\\name"]["data_offsets"], nlohmann::json({8, 16}));
    EXPECT_EQ((h.size() - 8) % 8, 0u);
}

TEST(SafetensorsHeader, PaddingForEveryRemainder) {
    // Names of growing length hit every remainder mod 8.
    for (int len = 1; len <= 16; ++len) {
        const OutputTensor t = tensor(std::string(len, 'x'), DType::U8, {1});
        const std::string h = safetensors_header({&t});
        EXPECT_EQ(le64(h), h.size() - 8);
        EXPECT_EQ((h.size() - 8) % 8, 0u);
        const std::string json = h.substr(8);
        const size_t close = json.find_last_of('}');
        EXPECT_LT(json.size() - close - 1, 8u);
        EXPECT_NO_THROW(nlohmann::json::parse(json));
    }
}

// --- index_json ---------------------------------------------------------------------------

TEST(IndexJson, SortedCompleteWithTotalSize) {
    const std::vector<OutputTensor> tensors = {
        tensor("model.layers.1.w", DType::F32, {2}),  // 8 bytes
        tensor("lm_head.weight", DType::BF16, {5}),   // 10
        tensor("model.embed.weight", DType::F32, {3}),// 12
    };
    const OutputLayout layout = plan_safetensors_layout(tensors, 10);
    ASSERT_EQ(layout.files.size(), 3u);
    const std::string text = index_json(tensors, layout);
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n');
    EXPECT_NE(text[text.size() - 2], '\n');
    const auto j = nlohmann::json::parse(text);
    EXPECT_EQ(j["metadata"]["total_size"], 30);
    EXPECT_EQ(j["weight_map"].size(), 3u);
    EXPECT_EQ(j["weight_map"]["model.layers.1.w"], "model-00001-of-00003.safetensors");
    EXPECT_EQ(j["weight_map"]["lm_head.weight"], "model-00002-of-00003.safetensors");
    EXPECT_EQ(j["weight_map"]["model.embed.weight"], "model-00003-of-00003.safetensors");
    // Sorted keys, 2-space indent: "metadata" before "weight_map", and the names in order.
    EXPECT_LT(text.find("\"metadata\""), text.find("\"weight_map\""));
    EXPECT_LT(text.find("\"lm_head.weight\""), text.find("\"model.embed.weight\""));
    EXPECT_LT(text.find("\"model.embed.weight\""), text.find("\"model.layers.1.w\""));
    EXPECT_EQ(text.rfind("{\n  \"metadata\": {\n    ", 0), 0u) << text;
    // Text is exactly what a sorted-key dump would give.
    EXPECT_EQ(text, j.dump(2) + "\n");
}

using testing::error_of;
TEST(SafetensorsHeaderCheck, TheHeaderWriterRefusesAReservedName) {
    const OutputTensor t = testing::tensor("__metadata__", DType::F32, {2});
    EXPECT_NE(error_of([&] { safetensors_header({&t}, "model-00001-of-00002.safetensors"); })
                  .find("model-00001-of-00002.safetensors: safetensors header: tensor '__metadata__'"),
              std::string::npos);
}

}  // namespace
}  // namespace vmerge
