// Unit tests for exec/copy_executor: it reads through an injected source (no file), hands
// row blocks to the sink in order, and calls task_done on its own thread after a task's last block.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/copy_executor.h"
#include "exec/source_reader.h"
#include "formats/table_mapping.h"

namespace vmerge {
namespace {

// Bytes in memory, by source name; counts reads.
class MemorySource final : public SourceReader {
public:
    MemorySource(const std::vector<unsigned char>& bytes, int& reads) : bytes_(bytes), reads_(reads) {}
    void read_exact(uint64_t offset, void* out, uint64_t length, const char*) const override {
        if (offset + length > bytes_.size()) throw Error("read outside the fake source");
        std::memcpy(out, bytes_.data() + offset, length);
        ++reads_;
    }
    void drop_cache(uint64_t, uint64_t) const override { ++drops; }
    mutable int drops = 0;

private:
    const std::vector<unsigned char>& bytes_;
    int& reads_;
};

// A contiguous fp32 source tensor of `shape`, the whole of source `name`.
TensorRef float_source(const std::string& name, const Shape& shape) {
    TensorRef source;
    source.dtype = DType::F32;
    source.shape = shape;
    source.stride = contiguous_strides(source.shape);
    source.storage.file = name;
    source.storage.byte_size = source.nbytes();
    return source;
}

// One source tensor `name` of rows x cols floats 0, 1, 2, ... copied whole into one output tensor.
TensorMapping whole_copy(const std::string& name, int64_t rows, int64_t cols) {
    TensorMapping mapping;
    mapping.sources.push_back(float_source(name, {rows, cols}));
    OutputTensor t;
    t.name = "out";
    t.source_dtype = t.dtype = DType::F32;
    t.shape = {rows, cols};
    t.copies.push_back({0, {0, 0}, {0, 0}, {rows, cols}});
    mapping.tensors.push_back(t);
    return mapping;
}

std::vector<unsigned char> counting_floats(size_t n) {
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = static_cast<float>(i);
    std::vector<unsigned char> bytes(n * sizeof(float));
    std::memcpy(bytes.data(), f.data(), bytes.size());
    return bytes;
}

TEST(CopyExecutor, ReadsThroughAnInjectedSource) {
    const TensorMapping mapping = whole_copy("memory:a", 6, 4);
    const auto bytes = counting_floats(24);
    int reads = 0;
    std::vector<std::string> opened;
    CopyExecutor executor(mapping, 64 << 20);
    executor.read_sources_with([&](const std::string& file) -> std::unique_ptr<SourceReader> {
        opened.push_back(file);
        return std::make_unique<MemorySource>(bytes, reads);
    });
    std::vector<unsigned char> written(bytes.size());
    executor.run({{0, 0, 3}, {0, 3, 6}}, [&](const RowBlock& b) {
        EXPECT_EQ(b.tensor, 0u);
        EXPECT_EQ(b.size, static_cast<size_t>(b.row_end - b.row_begin) * 16);
        std::memcpy(written.data() + b.row_begin * 16, b.data, b.size);
    });
    EXPECT_EQ(written, bytes);
    EXPECT_EQ(opened, std::vector<std::string>{"memory:a"});  // opened once, kept
    EXPECT_EQ(reads, 2);
    EXPECT_EQ(executor.stats().bytes_read, bytes.size());
}

// Two shards of a [5, 6] weight split along dim 1 (row-parallel TP): each shard's rows are read
// straight into their half of the output rows, in blocks of 2 rows.
TEST(CopyExecutor, ShardsSplitAlongDimOneLandInTheirColumns) {
    TensorMapping mapping;
    for (const std::string name : {"memory:tp0", "memory:tp1"}) mapping.sources.push_back(float_source(name, {5, 3}));
    OutputTensor t;
    t.name = "out";
    t.source_dtype = t.dtype = DType::F32;
    t.shape = {5, 6};
    t.copies.push_back({0, {0, 0}, {0, 0}, {5, 3}});
    t.copies.push_back({1, {0, 0}, {0, 3}, {5, 3}});
    mapping.tensors.push_back(t);
    const auto tp0 = counting_floats(15);
    std::vector<float> second(15);
    for (size_t i = 0; i < 15; ++i) second[i] = 100.0f + static_cast<float>(i);
    std::vector<unsigned char> tp1(15 * sizeof(float));
    std::memcpy(tp1.data(), second.data(), tp1.size());
    int reads = 0;
    CopyExecutor executor(mapping, 6 * 4 * 2 * 2);  // two rows of a block
    executor.read_sources_with([&](const std::string& file) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(file == "memory:tp0" ? tp0 : tp1, reads);
    });
    std::vector<float> written(30, -1.0f);
    executor.run({{0, 0, 5}}, [&](const RowBlock& b) {
        std::memcpy(written.data() + b.row_begin * 6, b.data, b.size);
    });
    for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 6; ++c)
            EXPECT_EQ(written[r * 6 + c], c < 3 ? static_cast<float>(r * 3 + c) : 100.0f + static_cast<float>(r * 3 + c - 3))
                << r << "," << c;
}

// GPT-OSS experts as torchtitan stores them, [E, out, in] in two FSDP chunks along E, written
// as Hugging Face stores them, [E, in, out]: the transposed views read through the executor,
// in blocks of one expert.
TEST(CopyExecutor, TransposedExpertsLandTransposed) {
    const int64_t experts = 4, out_dim = 3, in_dim = 5;
    TensorMapping mapping;
    for (const std::string name : {"memory:fsdp0", "memory:fsdp1"})
        mapping.sources.push_back(float_source(name, {experts / 2, out_dim, in_dim}));
    OutputTensor grouped;
    grouped.name = "mlp1_weight_EGD";
    grouped.source_dtype = grouped.dtype = DType::F32;
    grouped.shape = {experts, out_dim, in_dim};
    grouped.copies.push_back({0, {0, 0, 0}, {0, 0, 0}, {experts / 2, out_dim, in_dim}});
    grouped.copies.push_back({1, {0, 0, 0}, {experts / 2, 0, 0}, {experts / 2, out_dim, in_dim}});
    mapping.tensors.push_back(transposed(grouped, "gate_up_proj", mapping.sources));
    EXPECT_EQ(mapping.tensors[0].shape, (Shape{experts, in_dim, out_dim}));
    const int64_t per_chunk = experts / 2 * out_dim * in_dim;
    const auto chunk0 = counting_floats(static_cast<size_t>(per_chunk));
    std::vector<float> values(static_cast<size_t>(per_chunk));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(per_chunk + static_cast<int64_t>(i));
    std::vector<unsigned char> chunk1(values.size() * sizeof(float));
    std::memcpy(chunk1.data(), values.data(), chunk1.size());
    int reads = 0;
    CopyExecutor executor(mapping, in_dim * out_dim * 4 * 2);  // one expert a block
    executor.read_sources_with([&](const std::string& file) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(file == "memory:fsdp0" ? chunk0 : chunk1, reads);
    });
    std::vector<float> written(static_cast<size_t>(experts * in_dim * out_dim), -1.0f);
    executor.run({{0, 0, experts}}, [&](const RowBlock& b) {
        std::memcpy(written.data() + b.row_begin * in_dim * out_dim, b.data, b.size);
    });
    // HF [e][i][o] is torchtitan's [e][o][i]; the counting values are that element's flat index.
    for (int64_t e = 0; e < experts; ++e)
        for (int64_t i = 0; i < in_dim; ++i)
            for (int64_t o = 0; o < out_dim; ++o)
                EXPECT_EQ(written[static_cast<size_t>((e * in_dim + i) * out_dim + o)],
                          static_cast<float>((e * out_dim + o) * in_dim + i)) << e << "," << i << "," << o;
}

// GPT-OSS's experts as Megatron keeps them: expert e's fc1 [2F, H] holds [gate; up] rows, here
// stacked [E, 2F, H] from two tensor-parallel pieces of each half ([gate_r; up_r] per rank), and
// written as transformers stores gate_up_proj, [E, H, 2F] with column 2j the gate's row j and
// column 2j + 1 the up's row j: transposed, then the halves interleaved through copies_view.
TEST(CopyExecutor, InterleavedGateUpLandsAsGptOssStoresIt) {
    const int64_t experts = 2, half = 4, hidden = 3, tp = 2;
    TensorMapping mapping;
    // One source per TP rank: [E, 2 * half / tp, H], rows [gate_r; up_r].
    for (const std::string name : {"memory:tp0", "memory:tp1"})
        mapping.sources.push_back(float_source(name, {experts, 2 * half / tp, hidden}));
    OutputTensor stacked;
    stacked.name = "gate_up_proj";
    stacked.source_dtype = stacked.dtype = DType::F32;
    stacked.shape = {experts, 2 * half, hidden};
    const int64_t rows = half / tp;
    for (uint32_t r = 0; r < tp; ++r)
        for (int64_t k = 0; k < 2; ++k)  // gate, up
            stacked.copies.push_back({r, {0, k * rows, 0}, {0, k * half + r * rows, 0}, {experts, rows, hidden}});
    mapping.tensors.push_back(gate_up_interleaved(transposed(stacked, "t", mapping.sources), "gate_up_proj", mapping.sources));
    const OutputTensor& out = mapping.tensors[0];
    EXPECT_EQ(out.shape, (Shape{experts, hidden, 2 * half}));
    EXPECT_EQ(out.copies_view, (Shape{experts, hidden, half, 2}));
    check_copies_tile_output(out, mapping.sources);
    // Source r's element (e, row, h) holds 1000 r + its flat index.
    std::vector<std::vector<unsigned char>> bytes;
    for (int64_t r = 0; r < tp; ++r) {
        std::vector<float> v(static_cast<size_t>(experts * 2 * rows * hidden));
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(1000 * r + static_cast<int64_t>(i));
        bytes.emplace_back(v.size() * sizeof(float));
        std::memcpy(bytes.back().data(), v.data(), bytes.back().size());
    }
    int reads = 0;
    CopyExecutor executor(mapping, hidden * 2 * half * 4 * 2);  // one expert a block
    executor.read_sources_with([&](const std::string& file) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(bytes[file == "memory:tp0" ? 0 : 1], reads);
    });
    std::vector<float> written(static_cast<size_t>(experts * hidden * 2 * half), -1.0f);
    executor.run({{0, 0, experts}}, [&](const RowBlock& b) {
        std::memcpy(written.data() + b.row_begin * hidden * 2 * half, b.data, b.size);
    });
    for (int64_t e = 0; e < experts; ++e)
        for (int64_t h = 0; h < hidden; ++h)
            for (int64_t j = 0; j < half; ++j)
                for (int64_t k = 0; k < 2; ++k) {
                    // Row j of half k is on rank j / rows, at its row k * rows + j % rows.
                    const int64_t r = j / rows, row = k * rows + j % rows;
                    const float want = static_cast<float>(1000 * r + (e * 2 * rows + row) * hidden + h);
                    EXPECT_EQ(written[static_cast<size_t>((e * hidden + h) * 2 * half + 2 * j + k)], want)
                        << e << "," << h << "," << j << "," << k;
                }
}

// A bias [E, 2F] of [gate | up] halves, one piece straddling both halves: interleaved alone.
TEST(CopyExecutor, InterleavedGateUpBiasSplitsAPieceAtTheHalf) {
    const int64_t experts = 3, half = 2;
    TensorMapping mapping;
    mapping.sources.push_back(float_source("memory:b", {experts, 2 * half}));
    OutputTensor bias;
    bias.name = "b";
    bias.source_dtype = bias.dtype = DType::F32;
    bias.shape = {experts, 2 * half};
    bias.copies.push_back({0, {0, 0}, {0, 0}, {experts, 2 * half}});
    mapping.tensors.push_back(gate_up_interleaved(bias, "gate_up_proj_bias", mapping.sources));
    EXPECT_EQ(mapping.tensors[0].copies.size(), 2u);
    const auto bytes = counting_floats(static_cast<size_t>(experts * 2 * half));
    int reads = 0;
    CopyExecutor executor(mapping, 1 << 20);
    executor.read_sources_with([&](const std::string&) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(bytes, reads);
    });
    std::vector<float> written(static_cast<size_t>(experts * 2 * half), -1.0f);
    executor.run({{0, 0, experts}}, [&](const RowBlock& b) {
        std::memcpy(written.data() + b.row_begin * 2 * half, b.data, b.size);
    });
    const std::vector<float> want{0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11};
    EXPECT_EQ(written, want);
    OutputTensor odd = bias;
    odd.shape = {experts, 3};
    EXPECT_THROW(gate_up_interleaved(odd, "x", mapping.sources), Error);
}

// `values` in `dtype` (F32, or BF16 as a float's upper 16 bits: exact for these values).
std::vector<unsigned char> encoded(const std::vector<float>& values, DType dtype) {
    std::vector<unsigned char> bytes(values.size() * element_size(dtype));
    for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &values[i], 4);
        if (dtype == DType::F32) std::memcpy(bytes.data() + 4 * i, &bits, 4);
        else std::memcpy(bytes.data() + 2 * i, reinterpret_cast<const unsigned char*>(&bits) + 2, 2);  // little endian
    }
    return bytes;
}

std::vector<float> decoded(const std::vector<unsigned char>& bytes, DType dtype) {
    const size_t size = element_size(dtype);
    std::vector<float> values(bytes.size() / size);
    for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits = 0;
        if (dtype == DType::F32) std::memcpy(&bits, bytes.data() + 4 * i, 4);
        else std::memcpy(reinterpret_cast<unsigned char*>(&bits) + 2, bytes.data() + 2 * i, 2);
        std::memcpy(&values[i], &bits, 4);
    }
    return values;
}

// A [3, 2] tensor of `source` dtype `from`, written as `to` with `offset` added to every value.
std::vector<float> written_with_offset(const std::vector<float>& source, DType from, DType to, double offset) {
    TensorMapping mapping = whole_copy("memory:norm", 3, 2);
    mapping.sources[0].dtype = from;
    mapping.sources[0].storage.byte_size = mapping.sources[0].nbytes();
    OutputTensor& t = mapping.tensors[0];
    t.source_dtype = from;
    t.dtype = to;
    t.value_offset = offset;
    const auto bytes = encoded(source, from);
    int reads = 0;
    CopyExecutor executor(mapping, 1 << 20);
    executor.read_sources_with([&](const std::string&) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(bytes, reads);
    });
    std::vector<unsigned char> out(source.size() * element_size(to));
    executor.run({{0, 0, 3}}, [&](const RowBlock& b) {
        std::memcpy(out.data() + b.row_begin * 2 * element_size(to), b.data, b.size);
    });
    return decoded(out, to);
}

// A table rule's add (megatron-core's zero-centred norm gamma, HF's plain one): every value
// plus the offset, whatever the source and output dtypes; no offset, the values as they are.
TEST(CopyExecutor, ValueOffsetIsAddedToEveryValue) {
    const std::vector<float> source{0.5f, -1.0f, 2.0f, -0.25f, 0.0f, 8.0f};
    const std::vector<float> plus_one{1.5f, 0.0f, 3.0f, 0.75f, 1.0f, 9.0f};
    const std::vector<std::pair<DType, DType>> casts{
        {DType::BF16, DType::BF16}, {DType::F32, DType::F32}, {DType::F32, DType::BF16}, {DType::BF16, DType::F32}};
    for (const auto& [from, to] : casts) {
        const std::string what = std::string(torch_name(from)) + " -> " + std::string(torch_name(to));
        EXPECT_EQ(written_with_offset(source, from, to, 1.0), plus_one) << what;
        EXPECT_EQ(written_with_offset(source, from, to, 0.0), source) << what;
    }
    EXPECT_EQ(written_with_offset(source, DType::F32, DType::F32, -0.5),
              (std::vector<float>{0.0f, -1.5f, 1.5f, -0.75f, -0.5f, 7.5f}));
}

TEST(CopyExecutor, TaskDoneFollowsTheTasksLastBlock) {
    TensorMapping mapping = whole_copy("memory:b", 8, 2);
    mapping.tensors[0].row_align = 2;
    const auto bytes = counting_floats(16);
    int reads = 0;
    CopyExecutor executor(mapping, 1 << 20);
    executor.read_sources_with([&](const std::string&) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(bytes, reads);
    });
    std::vector<std::string> events;
    // An empty task is a round with nothing to write: no block, but task_done all the same.
    executor.run(
        {{0, 0, 4}, {0, 0, 0}, {0, 4, 8}},
        [&](const RowBlock& b) {
            events.push_back("block " + std::to_string(b.row_begin) + ".." + std::to_string(b.row_end));
        },
        {},
        [&](const WriteTask& task) {
            events.push_back("done " + std::to_string(task.row_begin) + ".." + std::to_string(task.row_end));
        });
    EXPECT_EQ(events, (std::vector<std::string>{"block 0..4", "done 0..4", "done 0..0", "block 4..8", "done 4..8"}));
}

TEST(CopyExecutor, SourceErrorsComeOutOfRun) {
    const TensorMapping mapping = whole_copy("memory:c", 4, 4);
    const std::vector<unsigned char> too_short(8);
    int reads = 0;
    CopyExecutor executor(mapping, 1 << 20);
    executor.read_sources_with([&](const std::string&) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(too_short, reads);
    });
    EXPECT_THROW(executor.run({{0, 0, 4}}, [](const RowBlock&) {}), Error);
}

// The page cache policy reaches the reads: evicted behind them only when asked (a merge that
// does not fit in memory), kept otherwise.
TEST(CopyExecutor, EvictsReadsOnlyWhenAsked) {
    const int64_t rows = 512, cols = 1024;  // 2 MiB of floats: reads large enough to evict
    const TensorMapping mapping = whole_copy("memory:c", rows, cols);
    const auto bytes = counting_floats(static_cast<size_t>(rows * cols));
    for (const bool evict : {false, true}) {
        int reads = 0;
        const MemorySource* source = nullptr;
        CopyExecutor executor(mapping, 64 << 20);
        executor.evict_reads(evict);
        executor.read_sources_with([&](const std::string&) -> std::unique_ptr<SourceReader> {
            auto reader = std::make_unique<MemorySource>(bytes, reads);
            source = reader.get();
            return reader;
        });
        executor.run({{0, 0, rows}}, [](const RowBlock&) {});
        ASSERT_NE(source, nullptr);
        EXPECT_EQ(source->drops > 0, evict) << "evict " << evict << ": " << source->drops << " drops";
    }
}

}  // namespace
}  // namespace vmerge
