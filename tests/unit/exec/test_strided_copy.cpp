// exec/strided_copy: a box copied out of a buffer laid out with any strides, checked element by
// element against the index arithmetic written out here (a transposed plane, a 3-axis box).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "exec/strided_copy.h"

namespace vmerge {
namespace {

// A plane larger than one tile in both directions, with ragged edges, read transposed.
TEST(StridedCopy, ATransposedPlaneLandsTransposed) {
    const int64_t rows = 70, cols = 45;  // the source is [cols, rows], read as [rows, cols]
    std::vector<uint16_t> source(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint16_t>(i);
    std::vector<uint16_t> out(source.size(), 0xFFFF);
    copy_strided_box(reinterpret_cast<const unsigned char*>(source.data()), {1, rows},
                     reinterpret_cast<unsigned char*>(out.data()), {cols, 1}, {rows, cols}, 2);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(out[r * cols + c], c * rows + r) << r << "," << c;
}

// A [2, 3, 4] box of a [2, 5, 4] float source (rows 1..3 of each plane) into a wider destination
// [2, 3, 6] at column 2: outer axis, row stride and destination stride all differ.
TEST(StridedCopy, ABoxOfContiguousRowsKeepsItsPlaceInTheDestination) {
    std::vector<float> source(2 * 5 * 4);
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<float>(i);
    std::vector<float> out(2 * 3 * 6, -1.0f);
    const float* first = source.data() + 1 * 4;  // plane 0, row 1
    copy_strided_box(reinterpret_cast<const unsigned char*>(first), {20, 4, 1},
                     reinterpret_cast<unsigned char*>(out.data() + 2), {18, 6, 1}, {2, 3, 4}, 4);
    for (int64_t p = 0; p < 2; ++p)
        for (int64_t r = 0; r < 3; ++r)
            for (int64_t c = 0; c < 6; ++c) {
                const float want = c < 2 ? -1.0f : static_cast<float>(p * 20 + (r + 1) * 4 + (c - 2));
                ASSERT_EQ(out[p * 18 + r * 6 + c], want) << p << "," << r << "," << c;
            }
}

TEST(StridedCopy, AnEmptyBoxWritesNothing) {
    std::vector<uint32_t> source(4, 7), out(4, 0);
    copy_strided_box(reinterpret_cast<const unsigned char*>(source.data()), {2, 1},
                     reinterpret_cast<unsigned char*>(out.data()), {2, 1}, {0, 2}, 4);
    EXPECT_EQ(out, std::vector<uint32_t>(4, 0));
}

}  // namespace
}  // namespace vmerge
