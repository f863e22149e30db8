// Unit tests for the ZeRO partition planning (src/formats/deepspeed/flat_partition.h): flat runs as
// boxes, and where ZeRO-1/2 groups and ZeRO-3 pieces put each parameter's elements. The expected
// values are worked out by hand from docs/reference/deepspeed-formats.md §4/§5, or enumerated.
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

const std::vector<std::string> kFiles{"r0.pt", "r1.pt", "r2.pt", "r3.pt"};
std::vector<std::string> files(size_t n) { return {kFiles.begin(), kFiles.begin() + static_cast<long>(n)}; }

// The message of the Error `f` throws ("" when none).
template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(DeepSpeedPartition, Zero2LayoutPadsTheGroupToTwiceTheWorldSize) {
    // 11 elements over W = 3: padded to 12, partitions of 4; the last rank saves 3.
    const Zero2Layout a = zero2_layout(11, 3);
    EXPECT_EQ(a.partition, 4);
    EXPECT_EQ(a.saved, (std::vector<int64_t>{4, 4, 3}));
    // 5 elements over W = 4: padded to 8, partitions of 2; ranks 3 saves nothing.
    const Zero2Layout b = zero2_layout(5, 4);
    EXPECT_EQ(b.partition, 2);
    EXPECT_EQ(b.saved, (std::vector<int64_t>{2, 2, 1, 0}));
    // 12 over W = 3 is already aligned: no padding at all.
    EXPECT_EQ(zero2_layout(12, 3).saved, (std::vector<int64_t>{4, 4, 4}));
}

TEST(DeepSpeedPartition, Zero2GroupReadsParametersAcrossRankPartitions) {
    // 11 elements, W = 3: padded to 12 (a multiple of 2·W), P = 4; the last rank saves 3.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {2, 3}}};
    const auto s = zero2_group_slices(params, {4, 4, 3}, files(3), "g");
    ASSERT_EQ(s.params.size(), 2u);
    EXPECT_EQ(s.params[0], (std::vector<FlatSlice>{{0, 0, 0, 4}, {1, 0, 4, 1}}));
    EXPECT_EQ(s.params[1], (std::vector<FlatSlice>{{1, 1, 0, 3}, {2, 0, 3, 3}}));
    EXPECT_THROW(zero2_group_slices(params, {4, 4, 1}, files(3), "g"), Error);
    EXPECT_THROW(zero2_group_slices(params, {4, 4, 10}, files(3), "g"), Error);
}

TEST(DeepSpeedPartition, Zero2PartitionsMustHaveExactlyTheirLength) {
    // Still within the 2·W alignment, so zero_to_fp32's check passes them; each one shifts b
    // (or leaves its last element unread): every other length is refused, naming the rank's
    // file, the group and both sizes.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {2, 3}}};
    EXPECT_EQ(error_of([&] { zero2_group_slices(params, {5, 4, 3}, files(3), "group 0"); }),
              "r0.pt: group 0 holds 5 elements, but its param_shapes (11 elements, in 3 partitions of 4) give rank 0 "
              "exactly 4");
    EXPECT_EQ(error_of([&] { zero2_group_slices(params, {4, 4, 4}, files(3), "group 0"); }),
              "r2.pt: group 0 holds 4 elements, but its param_shapes (11 elements, in 3 partitions of 4) give rank 2 "
              "exactly 3");
    EXPECT_EQ(error_of([&] { zero2_group_slices(params, {3, 5, 3}, files(3), "group 0"); }),
              "r0.pt: group 0 holds 3 elements, but its param_shapes (11 elements, in 3 partitions of 4) give rank 0 "
              "exactly 4");
    // More ranks than elements: the ranks past the group's end save nothing.
    EXPECT_NO_THROW(zero2_group_slices({{"c", {3}}}, {2, 1, 0, 0}, files(4), "g"));
    EXPECT_THROW(zero2_group_slices({{"c", {3}}}, {2, 1, 0, 1}, files(4), "g"), Error);
}

TEST(DeepSpeedPartition, Zero2GroupSkipsParameterAlignmentPadding) {
    // DeepSpeed 0.19's parameter_alignment (8 elements for bf16): a [5] then 3 padding
    // elements, then b [2, 3]: 14 elements, W = 3, padded to 18, P = 6; the last rank saves 2.
    // b starts at element 8.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {2, 3}}};
    const auto s = zero2_group_slices(params, {6, 6, 2}, files(3), "g", {3, 0});
    ASSERT_EQ(s.params.size(), 2u);
    EXPECT_EQ(s.params[0], (std::vector<FlatSlice>{{0, 0, 0, 5}}));
    EXPECT_EQ(s.params[1], (std::vector<FlatSlice>{{1, 2, 0, 4}, {2, 0, 4, 2}}));
    // Read back to back, as before the paddings were known, b would start 3 elements early.
    EXPECT_THROW(zero2_group_slices(params, {6, 6, 2}, files(3), "g", {3}), Error);  // one padding per parameter
}

TEST(DeepSpeedPartition, Zero2AlignmentPaddingsMustBeWhatTheAlignmentGives) {
    // a [5] aligned to 2, 4, 8 or 16 elements is followed by 1, 3, 3 or 11; any other padding
    // (with partitions sized to match it) would shift b.
    const std::vector<FlatParam> params{{"a", {5}}, {"b", {2, 3}}};
    EXPECT_NO_THROW(zero2_group_slices(params, {4, 4, 4}, files(3), "g", {1, 0}));    // 12 elements
    EXPECT_NO_THROW(zero2_group_slices(params, {8, 8, 6}, files(3), "g", {11, 0}));   // 22 elements
    EXPECT_EQ(error_of([&] { zero2_group_slices(params, {6, 6, 3}, files(3), "g", {4, 0}); }),
              "r0.pt: g: param_alignment_paddings [4, 0] is not the padding that aligns each parameter's end to 1, 2, "
              "4, 8 or 16 elements (none after the last parameter)");
    EXPECT_THROW(zero2_group_slices(params, {6, 6, 2}, files(3), "g", {3, 1}), Error);  // padding after the last
}

TEST(DeepSpeedPartition, Zero3PiecesAreCeilNOverWPerRank) {
    // W = 4: a [5] (ps 2), b [3] (ps 1) in sub-group 0 (3 per rank), c [2, 4] (ps 2) in sub-group 1.
    const std::vector<std::vector<FlatParam>> groups{{{"a", {5}}, {"b", {3}}}, {{"c", {2, 4}}}};
    const std::vector<std::vector<int64_t>> lengths(4, {3, 2});
    const auto s = zero3_slices(groups, lengths, files(4));
    ASSERT_EQ(s.params.size(), 3u);
    EXPECT_EQ(s.params[0], (std::vector<FlatSlice>{{0, 0, 0, 2}, {2, 0, 2, 2}, {4, 0, 4, 1}}));
    EXPECT_EQ(s.params[1], (std::vector<FlatSlice>{{0, 2, 0, 1}, {2, 2, 1, 1}, {4, 2, 2, 1}}));
    EXPECT_EQ(s.params[2], (std::vector<FlatSlice>{{1, 0, 0, 2}, {3, 0, 2, 2}, {5, 0, 4, 2}, {7, 0, 6, 2}}));
    // Rank 3's piece of a ([6, 8)) and of b ([3, 4)) both lie past their ends: its flat 0 is padding.
    EXPECT_EQ(s.padding_only, (std::vector<size_t>{6}));
    auto short_rank = lengths;
    short_rank[2] = {3, 1};
    EXPECT_THROW(zero3_slices(groups, short_rank, files(4)), Error);
}

TEST(DeepSpeedPartition, Zero3FlatGroupsMustHaveExactlyTheirLength) {
    // Same totals per rank, another split between the sub-groups: c would be read one element
    // early. The error names the rank's file, the flat group and both sizes.
    const std::vector<std::vector<FlatParam>> groups{{{"a", {5}}, {"b", {3}}}, {{"c", {2, 4}}}};
    std::vector<std::vector<int64_t>> lengths(4, {3, 2});
    lengths[1] = {4, 1};
    EXPECT_EQ(error_of([&] { zero3_slices(groups, lengths, files(4)); }),
              "r1.pt: fp32_flat_groups.0 holds 4 elements, but its 2 parameters cut into 4 ranks (ceil(numel/4) "
              "each) need exactly 3");
    lengths[1] = {3, 2, 0};
    EXPECT_EQ(error_of([&] { zero3_slices(groups, lengths, files(4)); }),
              "r1.pt: 3 fp32_flat_groups, but param_shapes has 2 sub-groups");
}

TEST(DeepSpeedPartition, Zero3FlatOfOnlyPaddingIsNamed) {
    // W = 4 and a sub-group of two 2-element norms (ps 1): ranks 2 and 3 hold only padding in
    // flat group 1, which no parameter reads; group 0 (a [8], ps 2) is read on every rank.
    const std::vector<std::vector<FlatParam>> groups{{{"a", {8}}}, {{"n1", {2}}, {"n2", {2}}}};
    const auto s = zero3_slices(groups, std::vector<std::vector<int64_t>>(4, {2, 2}), files(4));
    EXPECT_EQ(s.params[1], (std::vector<FlatSlice>{{1, 0, 0, 1}, {3, 0, 1, 1}}));
    EXPECT_EQ(s.params[2], (std::vector<FlatSlice>{{1, 1, 0, 1}, {3, 1, 1, 1}}));
    EXPECT_EQ(s.padding_only, (std::vector<size_t>{5, 7}));  // rank 2's and rank 3's flat 1
}

TEST(DeepSpeedPartition, FragmentsKeepTheFirstNElements) {
    EXPECT_EQ(fragment_slices({3, 3, 3}, 7, files(3), "f"), (std::vector<FlatSlice>{{0, 0, 0, 3}, {1, 0, 3, 3}, {2, 0, 6, 1}}));
    EXPECT_EQ(fragment_slices({7}, 7, files(1), "f"), (std::vector<FlatSlice>{{0, 0, 0, 7}}));  // ZeRO-2: one fragment
    EXPECT_THROW(fragment_slices({3, 3}, 7, files(2), "f"), Error);
}

TEST(DeepSpeedPartition, FragmentsMustBeExactlyCeilNOverW) {
    // A rank-0 fragment one longer still holds all 7 elements, but shifts ranks 1 and 2's.
    EXPECT_EQ(error_of([&] { fragment_slices({4, 3, 3}, 7, files(3), "model.norm.weight"); }),
              "r0.pt: frozen_param_fragments 'model.norm.weight' holds 4 elements, but the parameter's 7 elements cut "
              "into 3 ranks need exactly 3");
    EXPECT_THROW(fragment_slices({3, 3, 4}, 7, files(3), "f"), Error);
    EXPECT_THROW(fragment_slices({8}, 7, files(1), "f"), Error);
}

}  // namespace
}  // namespace vmerge
