// Unit tests for the safetensors header rules of src/safetensors/safetensors_file.h: what the
// writer refuses to plan (SafetensorsHeaderCheck) and the reader's refusal of duplicate keys.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"
#include "safetensors/safetensors_file.h"
#include "test_support.h"

namespace vmerge {
namespace {

// The Error text `f` throws; "" when it throws none.
using testing::error_of;
TEST(SafetensorsHeaderCheck, GoodTensorsReturnTheirDataEnd) {
    SafetensorsHeaderCheck check("model.safetensors");
    EXPECT_EQ(check.add("a", DType::F32, {2, 3}, 24), 24u);
    EXPECT_EQ(check.add("b", DType::BF16, {0, 7}, 0), 24u);
    EXPECT_EQ(check.add("c", DType::BF16, {}, 2), 26u);
}

TEST(SafetensorsHeaderCheck, ReservedAndDuplicateNames) {
    SafetensorsHeaderCheck check("model.safetensors");
    EXPECT_NE(error_of([&] { check.add("__metadata__", DType::F32, {1}, 4); })
                  .find("model.safetensors: safetensors header: tensor '__metadata__': the name is reserved"),
              std::string::npos);
    check.add("model.norm.weight", DType::F32, {4}, 16);
    EXPECT_NE(error_of([&] { check.add("model.norm.weight", DType::F32, {4}, 16); })
                  .find("tensor 'model.norm.weight' is planned twice"),
              std::string::npos);
}

TEST(SafetensorsHeaderCheck, OverflowingOrMismatchedShapes) {
    SafetensorsHeaderCheck check("x.safetensors");
    const int64_t big = int64_t{1} << 62;
    // 2^62 bf16 elements: the count fits int64, the byte count 2^63 fits uint64, yet the
    // planned bytes (what a wrapped product gives) differ.
    EXPECT_NE(error_of([&] { check.add("t", DType::BF16, {big}, 0); })
                  .find("shape [4611686018427387904] of BF16 needs 9223372036854775808 bytes, but 0 are planned"),
              std::string::npos);
    EXPECT_NE(error_of([&] { check.add("u", DType::F32, {big}, 0); }).find("more than 2^63 elements or 2^64 bytes"),
              std::string::npos);  // 2^64 bytes
    EXPECT_NE(error_of([&] { check.add("v", DType::F32, {big, 4}, 0); }).find("more than 2^63 elements"),
              std::string::npos);
    EXPECT_NE(error_of([&] { check.add("w", DType::F32, {3}, 16); }).find("needs 12 bytes, but 16 are planned"),
              std::string::npos);
    // Offsets past 2^64 over several tensors.
    SafetensorsHeaderCheck sum("y.safetensors");
    sum.add("a", DType::U8, {big}, static_cast<uint64_t>(big));
    sum.add("b", DType::U8, {big}, static_cast<uint64_t>(big));
    sum.add("c", DType::U8, {big}, static_cast<uint64_t>(big));
    EXPECT_NE(error_of([&] { sum.add("d", DType::U8, {big}, static_cast<uint64_t>(big)); }).find("pass 2^64 bytes"),
              std::string::npos);
}

// A safetensors file with this header JSON (padded to 8) and `data_bytes` zero bytes of data.
struct SafetensorsTemp {
    SafetensorsTemp(std::string json, size_t data_bytes)
        : path(::testing::TempDir() + "vmerge_st_" + std::to_string(::getpid()) + ".safetensors") {
        json.append((8 - json.size() % 8) % 8, ' ');
        std::string length(8, '\0');
        for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((json.size() >> (8 * i)) & 0xFF);
        std::ofstream(path, std::ios::binary | std::ios::trunc) << length << json << std::string(data_bytes, '\0');
    }
    ~SafetensorsTemp() { std::remove(path.c_str()); }
    const std::string path;
};

TEST(SafetensorsReader, DuplicateKeyIsRefused) {
    const SafetensorsTemp good(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
    EXPECT_EQ(read_safetensors_header(good.path).entries.size(), 1u);
    const SafetensorsTemp twice(
        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
        4);
    EXPECT_NE(error_of([&] { read_safetensors_header(twice.path); }).find(twice.path + ": header names 'a' twice"),
              std::string::npos);
    // A key "a" inside a tensor entry is not a second tensor.
    const SafetensorsTemp nested(R"({"__metadata__":{"a":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
    EXPECT_EQ(read_safetensors_header(nested.path).entries.size(), 1u);
}

TEST(SafetensorsReader, OverflowingShapeIsRefused) {
    const SafetensorsTemp big(R"({"a":{"dtype":"BF16","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0);
    EXPECT_NE(error_of([&] { read_safetensors_header(big.path); }).find("0 bytes for shape [4611686018427387904]"),
              std::string::npos);
    const SafetensorsTemp huge(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0);
    EXPECT_NE(error_of([&] { read_safetensors_header(huge.path); }).find("more than 2^63 elements"), std::string::npos);
}

}  // namespace
}  // namespace vmerge
