// Unit tests for src/plan/output_layout.h: shard planning as transformers / huggingface_hub does it
// (greedy in order), through the safetensors file format.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "output/safetensors/safetensors_layout.h"
#include "plan/output_layout.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::tensor;

// --- plan_output_layout -------------------------------------------------------------------

std::vector<OutputTensor> bytes_tensors(const std::vector<int64_t>& sizes) {
    std::vector<OutputTensor> v;
    for (size_t i = 0; i < sizes.size(); ++i)
        v.push_back(tensor("t" + std::to_string(i), DType::U8, {sizes[i]}));
    return v;
}

std::vector<std::set<size_t>> groups(const OutputLayout& layout) {
    std::vector<std::set<size_t>> g;
    for (const auto& f : layout.files) g.emplace_back(f.tensors.begin(), f.tensors.end());
    return g;
}

TEST(PlanOutputLayout, GreedyLikeTransformersDocstring) {
    // [6,6,2,6,2,2] with a limit of 10 -> [6], [6+2], [6+2+2].
    const auto tensors = bytes_tensors({6, 6, 2, 6, 2, 2});
    const OutputLayout layout = plan_safetensors_layout(tensors, 10);
    ASSERT_EQ(layout.files.size(), 3u);
    EXPECT_EQ(groups(layout), (std::vector<std::set<size_t>>{{0}, {1, 2}, {3, 4, 5}}));
    EXPECT_EQ(layout.files[0].name, "model-00001-of-00003.safetensors");
    EXPECT_EQ(layout.files[1].name, "model-00002-of-00003.safetensors");
    EXPECT_EQ(layout.files[2].name, "model-00003-of-00003.safetensors");
    EXPECT_EQ(layout.total_size, 24u);
}

TEST(PlanOutputLayout, ExactlyAtTheLimitStaysInOneShard) {
    const auto tensors = bytes_tensors({4, 6});
    const OutputLayout layout = plan_safetensors_layout(tensors, 10);
    ASSERT_EQ(layout.files.size(), 1u);
    EXPECT_EQ(layout.files[0].name, "model.safetensors");
}

TEST(PlanOutputLayout, TensorLargerThanTheLimitGoesAlone) {
    {
        const auto tensors = bytes_tensors({20, 1});
        const OutputLayout layout = plan_safetensors_layout(tensors, 10);
        ASSERT_EQ(layout.files.size(), 2u);
        EXPECT_EQ(groups(layout), (std::vector<std::set<size_t>>{{0}, {1}}));
    }
    {
        // Whatever happens to its neighbours, the big tensor's file holds it alone.
        const auto tensors = bytes_tensors({3, 20, 3});
        const OutputLayout layout = plan_safetensors_layout(tensors, 10);
        const size_t f = layout.locations[1].file;
        EXPECT_EQ(layout.files[f].tensors, (std::vector<size_t>{1}));
        std::set<size_t> all;
        for (const auto& g : groups(layout)) all.insert(g.begin(), g.end());
        EXPECT_EQ(all, (std::set<size_t>{0, 1, 2}));
    }
}

TEST(PlanOutputLayout, SingleFileIsModelSafetensors) {
    const std::vector<OutputTensor> tensors = {tensor("a", DType::F32, {4, 4}), tensor("b", DType::F32, {4})};
    const OutputLayout layout = plan_safetensors_layout(tensors, 5'000'000'000ull);
    ASSERT_EQ(layout.files.size(), 1u);
    const OutputFile& f = layout.files[0];
    EXPECT_EQ(f.name, "model.safetensors");
    EXPECT_EQ(layout.total_size, 80u);
    EXPECT_EQ(f.size, f.header.size() + 80);
    // The header is the one safetensors_header makes for the file's tensors in data order.
    std::vector<const OutputTensor*> ordered;
    for (size_t i : f.tensors) ordered.push_back(&tensors[i]);
    EXPECT_EQ(f.header, safetensors_header(ordered));
    EXPECT_EQ(layout.locations[0].offset, f.header.size());       // "a" first by name
    EXPECT_EQ(layout.locations[1].offset, f.header.size() + 64);
}

TEST(PlanOutputLayout, ElevenShardsNamesArePaddedToFiveDigits) {
    const auto tensors = bytes_tensors(std::vector<int64_t>(11, 7));
    const OutputLayout layout = plan_safetensors_layout(tensors, 10);
    ASSERT_EQ(layout.files.size(), 11u);
    EXPECT_EQ(layout.files[0].name, "model-00001-of-00011.safetensors");
    EXPECT_EQ(layout.files[10].name, "model-00011-of-00011.safetensors");
}

TEST(PlanOutputLayout, LargerElementSizeFirstThenName) {
    const std::vector<OutputTensor> tensors = {
        tensor("b", DType::F16, {3}),      // 6 bytes
        tensor("a", DType::F32, {1}),      // 4
        tensor("z", DType::F64, {1}),      // 8
        tensor("c", DType::F32, {2}),      // 8
        tensor("m", DType::U8, {5}),       // 5
        tensor("a16", DType::F16, {1}),    // 2
        tensor("k", DType::I64, {2}),      // 16
    };
    const OutputLayout layout = plan_safetensors_layout(tensors, 1'000'000);
    ASSERT_EQ(layout.files.size(), 1u);
    const OutputFile& f = layout.files[0];
    // 8-byte: k, z; 4-byte: a, c; 2-byte: a16, b; 1-byte: m.
    EXPECT_EQ(f.tensors, (std::vector<size_t>{6, 2, 1, 3, 5, 0, 4}));
    const uint64_t h = f.header.size();
    EXPECT_EQ(layout.locations[6].offset, h);
    EXPECT_EQ(layout.locations[2].offset, h + 16);
    EXPECT_EQ(layout.locations[1].offset, h + 24);
    EXPECT_EQ(layout.locations[3].offset, h + 28);
    EXPECT_EQ(layout.locations[5].offset, h + 36);
    EXPECT_EQ(layout.locations[0].offset, h + 38);
    EXPECT_EQ(layout.locations[4].offset, h + 44);
    EXPECT_EQ(f.size, h + 49);
    EXPECT_EQ(layout.total_size, 49u);
}

TEST(PlanOutputLayout, OffsetsAreAlignedContiguousAndMatchTheHeader) {
    std::vector<OutputTensor> tensors;
    const DType types[] = {DType::BF16, DType::F32, DType::U8, DType::F64, DType::F16, DType::I32};
    for (int i = 0; i < 30; ++i)
        tensors.push_back(tensor("layer." + std::to_string(i), types[i % 6], {i % 7 + 1, 3}));
    const OutputLayout layout = plan_safetensors_layout(tensors, 100);
    ASSERT_GT(layout.files.size(), 2u);
    uint64_t total = 0;
    std::set<size_t> seen;
    for (size_t fi = 0; fi < layout.files.size(); ++fi) {
        const OutputFile& f = layout.files[fi];
        const uint64_t header = f.header.size();
        EXPECT_EQ(header % 8, 0u);
        const auto parsed = nlohmann::json::parse(f.header.substr(8));
        uint64_t offset = header;
        size_t prev_esize = SIZE_MAX;
        for (size_t i : f.tensors) {
            EXPECT_TRUE(seen.insert(i).second);
            const OutputTensor& t = tensors[i];
            const size_t esize = element_size(t.dtype);
            EXPECT_LE(esize, prev_esize);
            prev_esize = esize;
            EXPECT_EQ(layout.locations[i].file, fi);
            EXPECT_EQ(layout.locations[i].offset, offset);
            EXPECT_EQ(layout.locations[i].offset % esize, 0u) << t.name;
            EXPECT_EQ(parsed[t.name]["data_offsets"], nlohmann::json({offset - header, offset - header + t.nbytes()}));
            offset += t.nbytes();
            total += t.nbytes();
        }
        EXPECT_EQ(f.size, offset);
    }
    EXPECT_EQ(seen.size(), tensors.size());
    EXPECT_EQ(layout.total_size, total);
}

TEST(PlanOutputLayout, FilesKeepTheStateDictOrder) {
    // Greedy in order: the tensor indices of file k all come before those of file k+1.
    const auto tensors = bytes_tensors({3, 4, 5, 6, 7, 1, 2, 9, 9, 1});
    const OutputLayout layout = plan_safetensors_layout(tensors, 10);
    size_t last = 0;
    bool first = true;
    for (const auto& f : layout.files) {
        std::set<size_t> s(f.tensors.begin(), f.tensors.end());
        ASSERT_FALSE(s.empty());
        if (!first) {
            EXPECT_GT(*s.begin(), last);
        }
        last = *s.rbegin();
        first = false;
        uint64_t bytes = 0;
        for (size_t i : f.tensors) bytes += tensors[i].nbytes();
        EXPECT_TRUE(bytes <= 10 || f.tensors.size() == 1);
    }
}

TEST(PlanOutputLayout, EmptyTensorListGivesOneEmptyFile) {
    const OutputLayout layout = plan_safetensors_layout({}, 10);
    ASSERT_EQ(layout.files.size(), 1u);
    EXPECT_EQ(layout.files[0].name, "model.safetensors");
    EXPECT_EQ(layout.total_size, 0u);
    EXPECT_EQ(layout.files[0].size, layout.files[0].header.size());
}

}  // namespace
}  // namespace vmerge
