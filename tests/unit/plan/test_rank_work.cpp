// Unit tests for src/plan/rank_work.h: the per-rank write plan covers every output
// byte exactly once, splits only at row boundaries, and is balanced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "plan/rank_work.h"
#include "test_support.h"
#include "output/safetensors/safetensors_layout.h"

namespace vmerge {
namespace {

using testing::tensor;

struct Interval {
    size_t file;
    uint64_t begin;
    uint64_t end;
    int rank;
};

// Checks the plan against the layout: every byte once, row-aligned, in layout order, with
// ranks in non-decreasing order along that order. Returns bytes per rank.
std::vector<uint64_t> check_plan(const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                                 const std::vector<std::vector<WriteTask>>& work, int ranks) {
    std::vector<uint64_t> per_rank(ranks, 0);
    EXPECT_EQ(static_cast<int>(work.size()), ranks);
    std::vector<Interval> intervals;
    for (int r = 0; r < static_cast<int>(work.size()); ++r) {
        for (const WriteTask& task : work[r]) {
            EXPECT_LT(task.tensor, tensors.size());
            if (task.tensor >= tensors.size()) continue;
            const OutputTensor& t = tensors[task.tensor];
            EXPECT_GE(task.row_begin, 0);
            EXPECT_LT(task.row_begin, task.row_end) << "empty task for " << t.name;
            EXPECT_LE(task.row_end, row_count(t));
            const uint64_t rb = row_bytes(t);
            const TensorLocation& loc = layout.locations[task.tensor];
            intervals.push_back({loc.file, loc.offset + task.row_begin * rb, loc.offset + task.row_end * rb, r});
            per_rank[r] += (task.row_end - task.row_begin) * rb;
        }
    }
    // Expected: the data regions of every tensor with bytes.
    std::vector<std::pair<size_t, std::pair<uint64_t, uint64_t>>> regions;
    for (size_t i = 0; i < tensors.size(); ++i)
        if (tensors[i].nbytes() > 0)
            regions.push_back({layout.locations[i].file,
                               {layout.locations[i].offset, layout.locations[i].offset + tensors[i].nbytes()}});
    std::sort(regions.begin(), regions.end());
    std::sort(intervals.begin(), intervals.end(),
              [](const Interval& a, const Interval& b) { return std::tie(a.file, a.begin) < std::tie(b.file, b.begin); });
    // Walk both: the intervals tile each region with no gap or overlap.
    size_t k = 0;
    int last_rank = 0;
    for (const auto& [file, range] : regions) {
        uint64_t at = range.first;
        while (at < range.second) {
            if (k >= intervals.size() || intervals[k].file != file || intervals[k].begin != at) {
                ADD_FAILURE() << "file " << file << " byte " << at << " is not written exactly once";
                return per_rank;
            }
            EXPECT_GE(intervals[k].rank, last_rank) << "ranks out of layout order";
            last_rank = intervals[k].rank;
            at = intervals[k].end;
            ++k;
        }
        EXPECT_EQ(at, range.second) << "a task runs past its tensor";
    }
    EXPECT_EQ(k, intervals.size()) << "tasks outside the tensors' data";
    uint64_t sum = 0;
    for (uint64_t b : per_rank) sum += b;
    EXPECT_EQ(sum, layout.total_size);
    return per_rank;
}

std::vector<std::vector<OutputTensor>> tensor_lists() {
    std::vector<std::vector<OutputTensor>> lists;
    // A small LLM-like model.
    lists.push_back({tensor("model.embed_tokens.weight", DType::BF16, {1000, 64}),
                     tensor("model.layers.0.input_layernorm.weight", DType::BF16, {64}),
                     tensor("model.layers.0.self_attn.q_proj.weight", DType::BF16, {64, 64}),
                     tensor("model.layers.0.self_attn.q_proj.bias", DType::BF16, {64}),
                     tensor("model.layers.0.mlp.up_proj.weight", DType::BF16, {256, 64}),
                     tensor("model.layers.0.mlp.down_proj.weight", DType::BF16, {64, 256}),
                     tensor("model.norm.weight", DType::BF16, {64}),
                     tensor("lm_head.weight", DType::BF16, {1000, 64})});
    // Mixed dtypes, 0-d, 0-element and 3-d tensors.
    lists.push_back({tensor("scalar", DType::F32, {}), tensor("empty_rows", DType::F32, {0, 5}),
                     tensor("empty_cols", DType::F32, {7, 0}), tensor("cube", DType::F64, {5, 3, 2}),
                     tensor("vec", DType::F16, {33}), tensor("mat", DType::I32, {17, 9}),
                     tensor("scalar2", DType::BF16, {}), tensor("bytes", DType::U8, {101})});
    // One tensor only.
    lists.push_back({tensor("w", DType::F32, {97, 13})});
    // Only scalars.
    lists.push_back({tensor("s0", DType::F32, {}), tensor("s1", DType::F64, {}), tensor("s2", DType::F16, {})});
    // Many small tensors.
    std::vector<OutputTensor> many;
    for (int i = 0; i < 50; ++i) many.push_back(tensor("t" + std::to_string(i), DType::F32, {i % 5 + 1, i % 3 + 1}));
    lists.push_back(many);
    return lists;
}

TEST(RowCount, RowsAndRowBytes) {
    EXPECT_EQ(row_count(tensor("a", DType::F32, {5, 3})), 5);
    EXPECT_EQ(row_bytes(tensor("a", DType::F32, {5, 3})), 12u);
    EXPECT_EQ(row_count(tensor("s", DType::F64, {})), 1);
    EXPECT_EQ(row_bytes(tensor("s", DType::F64, {})), 8u);
    EXPECT_EQ(row_count(tensor("v", DType::BF16, {9})), 9);
    EXPECT_EQ(row_bytes(tensor("v", DType::BF16, {9})), 2u);
    EXPECT_EQ(row_count(tensor("c", DType::F16, {4, 3, 2})), 4);
    EXPECT_EQ(row_bytes(tensor("c", DType::F16, {4, 3, 2})), 12u);
    EXPECT_EQ(row_count(tensor("e", DType::F32, {0, 7})), 0);
    EXPECT_EQ(row_bytes(tensor("e", DType::F32, {0, 7})), 0u);
    EXPECT_EQ(row_bytes(tensor("e", DType::F32, {7, 0})), 0u);
}

TEST(PlanRankWork, CoversEveryByteOnceForOneToNineRanks) {
    for (const auto& tensors : tensor_lists()) {
        for (uint64_t shard_size : {uint64_t{1} << 40, uint64_t{1000}, uint64_t{50}}) {
            const OutputLayout layout = plan_safetensors_layout(tensors, shard_size);
            for (int ranks = 1; ranks <= 9; ++ranks) {
                SCOPED_TRACE("first tensor " + tensors[0].name + ", shard size " + std::to_string(shard_size) +
                             ", ranks " + std::to_string(ranks));
                const auto work = plan_rank_work(tensors, layout, ranks);
                check_plan(tensors, layout, work, ranks);
            }
        }
    }
}

TEST(PlanRankWork, OneRankWritesEverythingWholeTensors) {
    const auto tensors = tensor_lists()[1];
    const OutputLayout layout = plan_safetensors_layout(tensors, 1ull << 40);
    const auto work = plan_rank_work(tensors, layout, 1);
    ASSERT_EQ(work.size(), 1u);
    for (const WriteTask& task : work[0]) {
        EXPECT_EQ(task.row_begin, 0);
        EXPECT_EQ(task.row_end, row_count(tensors[task.tensor]));
    }
    // Every tensor with bytes appears once; 0-element ones do not need a task.
    std::map<size_t, int> seen;
    for (const WriteTask& task : work[0]) ++seen[task.tensor];
    for (size_t i = 0; i < tensors.size(); ++i)
        EXPECT_EQ(seen[i], tensors[i].nbytes() > 0 ? 1 : 0) << tensors[i].name;
}

TEST(PlanRankWork, ZeroDimTensorIsOneRow) {
    const std::vector<OutputTensor> tensors = {tensor("s", DType::F32, {})};
    const OutputLayout layout = plan_safetensors_layout(tensors, 1000);
    for (int ranks = 1; ranks <= 4; ++ranks) {
        const auto work = plan_rank_work(tensors, layout, ranks);
        int tasks = 0;
        for (const auto& w : work)
            for (const WriteTask& task : w) {
                ++tasks;
                EXPECT_EQ(task.tensor, 0u);
                EXPECT_EQ(task.row_begin, 0);
                EXPECT_EQ(task.row_end, 1);
            }
        EXPECT_EQ(tasks, 1);
    }
}

TEST(PlanRankWork, ZeroElementTensorsOnly) {
    const std::vector<OutputTensor> tensors = {tensor("a", DType::F32, {0}), tensor("b", DType::F32, {3, 0})};
    const OutputLayout layout = plan_safetensors_layout(tensors, 1000);
    for (int ranks = 1; ranks <= 3; ++ranks) {
        const auto work = plan_rank_work(tensors, layout, ranks);
        ASSERT_EQ(static_cast<int>(work.size()), ranks);
        for (const auto& w : work)
            for (const WriteTask& task : w) EXPECT_EQ(task.row_begin, task.row_end);
    }
}

TEST(PlanRankWork, MoreRanksThanRows) {
    const std::vector<OutputTensor> tensors = {tensor("w", DType::F32, {3, 4})};
    const OutputLayout layout = plan_safetensors_layout(tensors, 1000);
    for (int ranks : {4, 7, 9, 64}) {
        SCOPED_TRACE(ranks);
        const auto work = plan_rank_work(tensors, layout, ranks);
        const auto per_rank = check_plan(tensors, layout, work, ranks);
        int busy = 0;
        for (uint64_t b : per_rank) {
            busy += b > 0;
            EXPECT_LE(b, 16u);  // at most one row each: rows are the unit of work
        }
        EXPECT_EQ(busy, 3);
    }
}

TEST(PlanRankWork, BalancedWithinOneRowWhenTensorsAreBig) {
    std::vector<OutputTensor> tensors = {tensor("embed", DType::BF16, {32000, 128}),
                                         tensor("norm", DType::BF16, {128}),
                                         tensor("q", DType::BF16, {4096, 128}),
                                         tensor("up", DType::F32, {11008, 64}),
                                         tensor("head", DType::BF16, {32000, 128})};
    for (uint64_t shard_size : {uint64_t{1} << 40, uint64_t{5'000'000}}) {
        const OutputLayout layout = plan_safetensors_layout(tensors, shard_size);
        uint64_t max_row = 0;
        for (const auto& t : tensors) max_row = std::max(max_row, row_bytes(t));
        for (int ranks = 1; ranks <= 9; ++ranks) {
            SCOPED_TRACE("ranks " + std::to_string(ranks) + " shard size " + std::to_string(shard_size));
            const auto work = plan_rank_work(tensors, layout, ranks);
            const auto per_rank = check_plan(tensors, layout, work, ranks);
            const double ideal = static_cast<double>(layout.total_size) / ranks;
            for (int r = 0; r < ranks; ++r)
                EXPECT_LE(std::abs(static_cast<double>(per_rank[r]) - ideal), static_cast<double>(max_row) + ranks)
                    << "rank " << r << " has " << per_rank[r] << " bytes, ideal " << ideal;
        }
    }
}

TEST(PlanRankWork, SplitsOnlyAtRowBoundaries) {
    // Row of 3 floats = 12 bytes; total 100 rows. Whatever the split, tasks hold whole rows:
    // check_plan computes byte ranges from rows, so also check the byte sums are multiples.
    const std::vector<OutputTensor> tensors = {tensor("w", DType::F32, {100, 3})};
    const OutputLayout layout = plan_safetensors_layout(tensors, 1ull << 40);
    for (int ranks = 1; ranks <= 9; ++ranks) {
        const auto work = plan_rank_work(tensors, layout, ranks);
        const auto per_rank = check_plan(tensors, layout, work, ranks);
        for (uint64_t b : per_rank) EXPECT_EQ(b % 12, 0u);
    }
}

TEST(PlanRankWork, SameAnswerEveryCall) {
    const auto tensors = tensor_lists()[0];
    const OutputLayout layout = plan_safetensors_layout(tensors, 50'000);
    const auto a = plan_rank_work(tensors, layout, 5);
    const auto b = plan_rank_work(tensors, layout, 5);
    ASSERT_EQ(a.size(), b.size());
    for (size_t r = 0; r < a.size(); ++r) {
        ASSERT_EQ(a[r].size(), b[r].size());
        for (size_t i = 0; i < a[r].size(); ++i) {
            EXPECT_EQ(a[r][i].tensor, b[r][i].tensor);
            EXPECT_EQ(a[r][i].row_begin, b[r][i].row_begin);
            EXPECT_EQ(a[r][i].row_end, b[r][i].row_end);
        }
    }
}

TEST(PlanRankWork, FewerThanOneRankIsAnError) {
    const std::vector<OutputTensor> tensors = {tensor("w", DType::F32, {3})};
    const OutputLayout layout = plan_safetensors_layout(tensors, 1000);
    EXPECT_THROW(plan_rank_work(tensors, layout, 0), Error);
}

}  // namespace
}  // namespace vmerge
