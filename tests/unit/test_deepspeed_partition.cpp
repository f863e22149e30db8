// Unit tests for the ZeRO partition planning (src/formats/deepspeed/flat_partition.h): flat runs
// as boxes, and where ZeRO-1/2 groups and ZeRO-3 pieces put each parameter's elements. The
// expected values are worked out by hand from deepspeed-formats.md §4/§5, or enumerated.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "formats/deepspeed/flat_partition.h"

namespace vmerge {
namespace {

// Row-major flat index of every element of `box`, in flat order.
std::vector<int64_t> elements_of(const Shape& shape, const IndexBox& box) {
    std::vector<int64_t> out;
    const size_t n = shape.size();
    if (n == 0) return {0};
    Shape index = box.start;
    while (true) {
        int64_t flat = 0;
        for (size_t d = 0; d < n; ++d) flat = flat * shape[d] + index[d];
        out.push_back(flat);
        size_t d = n;
        while (d > 0) {
            --d;
            if (++index[d] < box.start[d] + box.extent[d]) break;
            index[d] = box.start[d];
            if (d == 0) return out;
        }
    }
}

TEST(DeepSpeedPartition, FlatRangeOfAMatrixIsPartialFullPartialRows) {
    const auto boxes = flat_range_boxes({3, 4}, 2, 11);
    ASSERT_EQ(boxes.size(), 3u);
    EXPECT_EQ(boxes[0].start, (Shape{0, 2}));
    EXPECT_EQ(boxes[0].extent, (Shape{1, 2}));
    EXPECT_EQ(boxes[1].start, (Shape{1, 0}));
    EXPECT_EQ(boxes[1].extent, (Shape{1, 4}));
    EXPECT_EQ(boxes[2].start, (Shape{2, 0}));
    EXPECT_EQ(boxes[2].extent, (Shape{1, 3}));
    EXPECT_EQ(flat_range_boxes({3, 4}, 4, 12).size(), 1u);  // whole rows: one box
    EXPECT_TRUE(flat_range_boxes({3, 4}, 5, 5).empty());
    EXPECT_EQ(flat_range_boxes({}, 0, 1).size(), 1u);  // a scalar
}

TEST(DeepSpeedPartition, FlatRangeBoxesEnumerateExactlyTheRangeInOrder) {
    std::mt19937 rng(7);
    const std::vector<Shape> shapes{{7}, {3, 5}, {2, 3, 4}, {4, 1, 3}, {2, 2, 2, 3}};
    for (const Shape& shape : shapes) {
        const int64_t n = numel(shape);
        for (int trial = 0; trial < 40; ++trial) {
            int64_t a = static_cast<int64_t>(rng() % (n + 1)), b = static_cast<int64_t>(rng() % (n + 1));
            if (a > b) std::swap(a, b);
            std::vector<int64_t> seen;
            for (const IndexBox& box : flat_range_boxes(shape, a, b)) {
                const auto e = elements_of(shape, box);
                for (size_t i = 1; i < e.size(); ++i) EXPECT_EQ(e[i], e[i - 1] + 1) << "a box is contiguous";
                seen.insert(seen.end(), e.begin(), e.end());
            }
            std::vector<int64_t> expected;
            for (int64_t i = a; i < b; ++i) expected.push_back(i);
            EXPECT_EQ(seen, expected) << shape_to_string(shape) << " [" << a << ", " << b << ")";
        }
    }
}

TEST(DeepSpeedPartition, ConcatenationSlicesSkipEmptyFlats) {
    const auto s = slices_of_concatenation({3, 0, 5}, 2, 7, 10);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0], (FlatSlice{0, 2, 10, 1}));
    EXPECT_EQ(s[1], (FlatSlice{2, 0, 11, 4}));
}

TEST(DeepSpeedPartition, Zero2GroupReadsParametersAcrossRankPartitions) {
    // 11 elements, W = 3: padded to 12 (a multiple of 2·W), P = 4; the last rank saves 3.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {2, 3}}};
    const auto s = zero2_group_slices(params, {4, 4, 3}, "g");
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0], (std::vector<FlatSlice>{{0, 0, 0, 4}, {1, 0, 4, 1}}));
    EXPECT_EQ(s[1], (std::vector<FlatSlice>{{1, 1, 0, 3}, {2, 0, 3, 3}}));
    EXPECT_NO_THROW(zero2_group_slices(params, {4, 4, 4}, "g"));  // within the alignment
    EXPECT_THROW(zero2_group_slices(params, {4, 4, 1}, "g"), Error);
    EXPECT_THROW(zero2_group_slices(params, {4, 4, 10}, "g"), Error);
}

TEST(DeepSpeedPartition, Zero2GroupSkipsParameterAlignmentPadding) {
    // DeepSpeed 0.19's parameter_alignment: a [5] then 3 padding elements, then b [2, 3]: 14
    // elements, W = 3, padded to 18, P = 6; the last rank saves 2. b starts at element 8.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {2, 3}}};
    const auto s = zero2_group_slices(params, {6, 6, 2}, "g", {3, 0});
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[0], (std::vector<FlatSlice>{{0, 0, 0, 5}}));
    EXPECT_EQ(s[1], (std::vector<FlatSlice>{{1, 2, 0, 4}, {2, 0, 4, 2}}));
    // Read back to back, as before the paddings were known, b would start 3 elements early.
    EXPECT_THROW(zero2_group_slices(params, {6, 6, 2}, "g", {3}), Error);  // one padding per parameter
}

TEST(DeepSpeedPartition, Zero3PiecesAreCeilNOverWPerRank) {
    // W = 4: a [5] (ps 2), b [3] (ps 1) in sub-group 0 (3 per rank), c [2, 4] (ps 2) in sub-group 1.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {3}}, {"c", {2, 4}}};
    const std::vector<std::vector<int64_t>> lengths(4, {3, 2});
    const auto s = zero3_slices(params, lengths, "z3");
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s[0], (std::vector<FlatSlice>{{0, 0, 0, 2}, {2, 0, 2, 2}, {4, 0, 4, 1}}));
    EXPECT_EQ(s[1], (std::vector<FlatSlice>{{0, 2, 0, 1}, {2, 2, 1, 1}, {4, 2, 2, 1}}));
    EXPECT_EQ(s[2], (std::vector<FlatSlice>{{1, 0, 0, 2}, {3, 0, 2, 2}, {5, 0, 4, 2}, {7, 0, 6, 2}}));
    auto short_rank = lengths;
    short_rank[2] = {3, 1};
    EXPECT_THROW(zero3_slices(params, short_rank, "z3"), Error);
}

TEST(DeepSpeedPartition, FragmentsKeepTheFirstNElements) {
    EXPECT_EQ(fragment_slices({3, 3, 3}, 7, "f"), (std::vector<FlatSlice>{{0, 0, 0, 3}, {1, 0, 3, 3}, {2, 0, 6, 1}}));
    EXPECT_THROW(fragment_slices({3, 3}, 7, "f"), Error);
}

}  // namespace
}  // namespace vmerge
