// The RoPE permutation and the expert split of formats/table_mapping.h: box copies whose rows are
// checked here against the formulas of docs/reference/torchtitan-formats.md §3, written
// independently of the code under test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/hf_config.h"
#include "core/error.h"
#include "core/tensor_mapping.h"
#include "formats/table_mapping.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::tensor;

TensorRef source(Shape shape, int64_t offset_elems = 0) {
    TensorRef r;
    r.dtype = DType::F32;
    r.shape = shape;
    r.stride = contiguous_strides(shape);
    r.storage.file = "f";
    r.storage.byte_offset = static_cast<uint64_t>(offset_elems) * 4;
    r.storage.byte_size = static_cast<uint64_t>(numel(shape)) * 4;
    return r;
}

// A tensor [rows, cols] assembled from two row chunks (FSDP2 Shard(0) over two ranks).
TensorMapping two_chunk_tensor(int64_t rows, int64_t cols, int64_t split) {
    TensorMapping m;
    m.sources = {source({split, cols}), source({rows - split, cols}, 1000)};
    OutputTensor t = tensor("w", DType::F32, {rows, cols});
    t.copies.push_back({0, {0, 0}, {0, 0}, {split, cols}});
    t.copies.push_back({1, {0, 0}, {split, 0}, {rows - split, cols}});
    m.tensors.push_back(t);
    return m;
}

TEST(RopePermutation, EveryHfRowTakesTheInterleavedRowOfItsHead) {
    const int64_t heads = 3, d = 8, cols = 5, rows = heads * d;
    const TensorMapping m = two_chunk_tensor(rows, cols, 10);
    const OutputTensor out = rope_permuted(m.tensors[0], heads, "q");
    EXPECT_EQ(out.shape, (Shape{rows, cols}));
    check_copies_tile_output(out, m.sources);
    // Torchtitan row h*d + q holds the pair element (p = q / 2, j = q % 2); HF puts it at
    // h*d + j*(d/2) + p.
    std::vector<int64_t> titan_row_of(rows, -1);
    for (const BoxCopy& c : out.copies) {
        ASSERT_EQ(c.extent[0], 1);
        const int64_t global = c.src_start[0] + (c.source == 0 ? 0 : 10);
        titan_row_of[c.dst_start[0]] = global;
    }
    for (int64_t s = 0; s < rows; ++s) {
        const int64_t h = s / d, q = s % d;
        EXPECT_EQ(titan_row_of[h * d + (q % 2) * (d / 2) + q / 2], s) << "torchtitan row " << s;
    }
}

TEST(RopePermutation, RowsThatAreNotHeadsOfAnEvenDimAreAnError) {
    const TensorMapping m = two_chunk_tensor(12, 2, 6);
    EXPECT_THROW(rope_permuted(m.tensors[0], 4, "q"), Error);  // d = 3
    EXPECT_THROW(rope_permuted(m.tensors[0], 5, "q"), Error);
}

TEST(ExpertSplit, EachExpertIsAViewOfItsChunk) {
    TensorMapping m;
    m.sources = {source({2, 3, 4}), source({2, 3, 4}, 500)};
    OutputTensor grouped = tensor("w1_EFD", DType::F32, {4, 3, 4});
    grouped.copies.push_back({0, {0, 0, 0}, {0, 0, 0}, {2, 3, 4}});
    grouped.copies.push_back({1, {0, 0, 0}, {2, 0, 0}, {2, 3, 4}});
    const auto experts = split_experts(grouped, "model.layers.7.mlp.experts.{e}.gate_proj.weight", "7", m.sources);
    ASSERT_EQ(experts.size(), 4u);
    for (int64_t e = 0; e < 4; ++e) {
        const OutputTensor& t = experts[e];
        EXPECT_EQ(t.name, "model.layers.7.mlp.experts." + std::to_string(e) + ".gate_proj.weight");
        EXPECT_EQ(t.shape, (Shape{3, 4}));
        ASSERT_EQ(t.copies.size(), 1u);
        const TensorRef& view = m.sources[t.copies[0].source];
        EXPECT_EQ(view.shape, (Shape{3, 4}));
        // Expert e lives in chunk e / 2 at index e % 2: 12 elements per expert.
        EXPECT_EQ(view.storage.byte_offset, (e < 2 ? 0u : 2000u));
        EXPECT_EQ(view.storage_offset, (e % 2) * 12);
        check_copies_tile_output(t, m.sources);
    }
}

// torchtitan numbers its MTP depths apart (mtp_layers.{k}); HF puts depth k at layer
// num_hidden_layers + k. A rule's layer_offset says so; the main layers keep their numbers.
TEST(LayerOffset, MtpDepthsFollowTheMainLayers) {
    const ArchitectureTable table = parse_architecture_table("t.json", nlohmann::json::parse(R"({
        "vmerge_architecture_table": 1, "name": "n", "source": "torchtitan", "architectures": ["A"],
        "rules": [{"from": "layers.{i}.enorm.weight", "to": "model.layers.{i}.enorm.weight"},
                  {"from": "mtp_layers.{i}.enorm.weight", "to": "model.layers.{i}.enorm.weight",
                   "layer_offset": "num_hidden_layers"},
                  {"from": "mtp_layers.{i}.w1_EFD", "to": "model.layers.{i}.mlp.experts.{e}.gate_proj.weight",
                   "transform": "split_experts", "layer_offset": "num_hidden_layers"}]})"));
    const HfConfig config = parse_hf_config("cfg", R"({"num_hidden_layers": 61})");
    TensorMapping m;
    m.sources = {source({4}), source({4}, 100), source({4}, 200), source({2, 3, 4}, 300)};
    const std::vector<std::pair<std::string, Shape>> keys{
        {"layers.0.enorm.weight", {4}}, {"mtp_layers.0.enorm.weight", {4}}, {"mtp_layers.2.enorm.weight", {4}},
        {"mtp_layers.1.w1_EFD", {2, 3, 4}}};
    for (size_t k = 0; k < keys.size(); ++k) {
        OutputTensor t = tensor(keys[k].first, DType::F32, keys[k].second);
        t.copies.push_back({static_cast<uint32_t>(k), Shape(keys[k].second.size(), 0), Shape(keys[k].second.size(), 0),
                            keys[k].second});
        m.tensors.push_back(t);
    }
    std::vector<ScannedFile> scans;
    SourceLedger ledger(scans);
    std::vector<std::string> notes;
    const TableApplication applied = apply_architecture_table(m, table, config, false, notes, ledger);
    std::vector<std::string> names;
    for (const OutputTensor& t : applied.mapping.tensors) names.push_back(t.name);
    EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.enorm.weight", "model.layers.61.enorm.weight",
                                               "model.layers.62.mlp.experts.0.gate_proj.weight",
                                               "model.layers.62.mlp.experts.1.gate_proj.weight",
                                               "model.layers.63.enorm.weight"}));
    EXPECT_EQ(applied.applied["rules_applied"][1]["layer_offset"], "num_hidden_layers");
    // The offset is read from config.json: a config without it is an error naming the key.
    const HfConfig bare = parse_hf_config("cfg", "{}");
    EXPECT_THROW(apply_architecture_table(m, table, bare, false, notes, ledger), Error);
}

}  // namespace
}  // namespace vmerge
