// Unit tests for check_copies_tile_output and OutputNames (src/core/tensor_mapping.h): copies that
// tile an output tensor exactly, and one output name per key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor_mapping.h"
#include "test_support.h"

namespace vmerge {
namespace {

using vmerge::testing::plain;

using testing::error_of;
using testing::contains;
// --- check_copies_tile_output ------------------------------------------------------------

OutputTensor out_tensor(Shape shape, std::vector<BoxCopy> copies) {
    OutputTensor t;
    t.name = "w";
    t.shape = std::move(shape);
    t.copies = std::move(copies);
    return t;
}

BoxCopy box(uint32_t source, Shape src, Shape dst, Shape extent) {
    BoxCopy c;
    c.source = source;
    c.src_start = std::move(src);
    c.dst_start = std::move(dst);
    c.extent = std::move(extent);
    return c;
}

TEST(CheckCopiesTileOutput, ExactTilingPasses) {
    const std::vector<TensorRef> sources = {plain({5, 4}, "a"), plain({5, 4}, "b")};
    EXPECT_NO_THROW(check_copies_tile_output(
        out_tensor({10, 4}, {box(0, {0, 0}, {0, 0}, {5, 4}), box(1, {0, 0}, {5, 0}, {5, 4})}), sources));
    // Two column blocks of one source each.
    const std::vector<TensorRef> cols = {plain({3, 2}, "a"), plain({3, 2}, "b")};
    EXPECT_NO_THROW(check_copies_tile_output(
        out_tensor({3, 4}, {box(0, {0, 0}, {0, 0}, {3, 2}), box(1, {0, 0}, {0, 2}, {3, 2})}), cols));
}

TEST(CheckCopiesTileOutput, HoleIsCaught) {
    const std::vector<TensorRef> sources = {plain({4, 4}, "a"), plain({4, 4}, "b")};
    EXPECT_THROW(check_copies_tile_output(
                     out_tensor({10, 4}, {box(0, {0, 0}, {0, 0}, {4, 4}), box(1, {0, 0}, {5, 0}, {4, 4})}), sources),
                 Error);
    EXPECT_THROW(check_copies_tile_output(out_tensor({3}, {}), {}), Error);
}

TEST(CheckCopiesTileOutput, OverlapIsCaught) {
    // Volumes add up (5 + 5 = 10) but rows 3..4 are written twice and 8..9 never.
    const std::vector<TensorRef> sources = {plain({5, 2}, "a.pt"), plain({5, 2}, "b.pt")};
    const std::string msg = error_of([&] {
        check_copies_tile_output(
            out_tensor({10, 2}, {box(0, {0, 0}, {0, 0}, {5, 2}), box(1, {0, 0}, {3, 0}, {5, 2})}), sources);
    });
    EXPECT_TRUE(contains(msg, "a.pt") && contains(msg, "b.pt")) << msg;
    // Plain overlap with too many elements.
    const std::vector<TensorRef> big = {plain({6, 2}, "a"), plain({6, 2}, "b")};
    EXPECT_THROW(check_copies_tile_output(
                     out_tensor({10, 2}, {box(0, {0, 0}, {0, 0}, {6, 2}), box(1, {0, 0}, {4, 0}, {6, 2})}), big),
                 Error);
}

TEST(CheckCopiesTileOutput, OutOfBoundsIsCaught) {
    const std::vector<TensorRef> sources = {plain({5, 2}, "a"), plain({5, 2}, "b")};
    // Destination past the end of the output.
    EXPECT_THROW(check_copies_tile_output(
                     out_tensor({10, 2}, {box(0, {0, 0}, {0, 0}, {5, 2}), box(1, {0, 0}, {6, 0}, {5, 2})}), sources),
                 Error);
    // Source box past the end of its source.
    EXPECT_THROW(check_copies_tile_output(
                     out_tensor({10, 2}, {box(0, {0, 0}, {0, 0}, {5, 2}), box(1, {1, 0}, {5, 0}, {5, 2})}), sources),
                 Error);
    // Source index out of range.
    EXPECT_THROW(check_copies_tile_output(out_tensor({5, 2}, {box(7, {0, 0}, {0, 0}, {5, 2})}), sources), Error);
    // Wrong rank of the box.
    EXPECT_THROW(check_copies_tile_output(out_tensor({5, 2}, {box(0, {0}, {0}, {5})}), sources), Error);
}

// check_copies_tile_output's O(n log n) path for many slabs (FSDP over thousands of ranks).
TEST(CheckCopiesTileOutput, ManySlabsOverlapAndHoleAreCaught) {
    TensorRef src;
    src.dtype = DType::F32;
    src.shape = {10, 4};
    src.stride = {4, 1};
    OutputTensor t;
    t.name = "w";
    t.shape = {100, 4};
    std::vector<TensorRef> sources(10, src);
    for (uint32_t r = 0; r < 10; ++r) t.copies.push_back({r, {0, 0}, {10 * int64_t(r), 0}, {10, 4}});
    EXPECT_NO_THROW(check_copies_tile_output(t, sources));
    // Same volume, but rank 9's slab lands on rank 8's rows: an overlap and a hole.
    t.copies[9].dst_start = {85, 0};
    EXPECT_THROW(check_copies_tile_output(t, sources), Error);
    // Column slabs (Concat1) take the same path.
    OutputTensor c;
    c.name = "c";
    c.shape = {10, 40};
    for (uint32_t r = 0; r < 10; ++r) c.copies.push_back({r, {0, 0}, {0, 4 * int64_t(r)}, {10, 4}});
    EXPECT_NO_THROW(check_copies_tile_output(c, sources));
    c.copies[3].dst_start = {0, 2};
    c.copies[3].extent = {10, 4};
    c.copies[4].dst_start = {0, 14};
    EXPECT_THROW(check_copies_tile_output(c, sources), Error);
}

// --- OutputNames ---------------------------------------------------------------------------

TEST(OutputNames, TwoKeysForOneNameNameBothKeys) {
    OutputNames names("/c/r0.pt");
    names.claim("model.norm.weight", "model.norm.weight");
    const std::string msg = error_of([&] { names.claim("model.norm.weight", "_fsdp_wrapped_module.model.norm.weight"); });
    EXPECT_EQ(msg, "/c/r0.pt: keys 'model.norm.weight' and '_fsdp_wrapped_module.model.norm.weight' both become "
                   "output tensor 'model.norm.weight'");
}

TEST(OutputNames, MetadataAndEmptyNamesAreRefused) {
    OutputNames names("/c/r0.pt");
    EXPECT_TRUE(contains(error_of([&] { names.claim("__metadata__", "module.__metadata__"); }),
                         "key 'module.__metadata__' becomes the output tensor name '__metadata__'"));
    EXPECT_TRUE(contains(error_of([&] { names.claim("", "module."); }), "key 'module.' becomes an empty output tensor name"));
}

}  // namespace
}  // namespace vmerge
