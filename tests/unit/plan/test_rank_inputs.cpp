// Unit tests for input_files_per_rank (plan/rank_inputs.h): the input files a rank's rows
// read from, counted by hand for a small mapping.
#include <gtest/gtest.h>

#include "plan/rank_inputs.h"

namespace vmerge {
namespace {

TensorRef source_in(const std::string& file, Shape shape) {
    TensorRef t;
    t.dtype = DType::BF16;
    t.stride = contiguous_strides(shape);
    t.shape = std::move(shape);
    t.storage.file = file;
    return t;
}

TEST(RankInputs, CountsTheFilesWhoseCopiesMeetTheRanksRows) {
    TensorMapping m;
    m.sources = {source_in("A", {2, 3}), source_in("B", {2, 3}), source_in("C", {2, 3}), source_in("A", {1})};
    OutputTensor w;  // rows 0-1 from A, rows 2-3 from B
    w.name = "w";
    w.shape = {4, 3};
    w.copies = {{0, {0, 0}, {0, 0}, {2, 3}}, {1, {0, 0}, {2, 0}, {2, 3}}};
    OutputTensor v;  // from C
    v.name = "v";
    v.shape = {2, 3};
    v.copies = {{2, {0, 0}, {0, 0}, {2, 3}}};
    OutputTensor scalar;  // a 0-d tensor: its one row reads file A
    scalar.name = "s";
    scalar.copies = {{3, {}, {}, {}}};
    m.tensors = {w, v, scalar};
    const std::vector<std::vector<WriteTask>> work = {
        {{0, 0, 3}},             // rows 0-2 of w: A and B
        {{0, 3, 4}, {1, 0, 2}},  // row 3 of w (B) and v (C)
        {{0, 0, 2}, {2, 0, 1}},  // rows 0-1 of w (A) and the scalar (A again)
        {},                      // nothing to write
    };
    EXPECT_EQ(input_files_per_rank(m, work), (std::vector<size_t>{2, 2, 1, 0}));
}

}  // namespace
}  // namespace vmerge
