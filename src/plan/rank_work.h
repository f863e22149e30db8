#pragma once
#include <cstdint>
#include <vector>

#include "plan/output_layout.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// Rows [row_begin, row_end) along dim 0 of one output tensor (a 0-d tensor is one row).
struct WriteTask {
    size_t tensor = 0;
    int64_t row_begin = 0;
    int64_t row_end = 0;
};

int64_t row_count(const OutputTensor& t);
uint64_t row_bytes(const OutputTensor& t);  // output bytes of one row

// Gives each of `ranks` ranks a contiguous share of the output bytes, walking the files in
// layout order; a tensor that crosses a share boundary is split by rows, so no two ranks
// ever write the same byte. Pure: every rank computes the same answer.
std::vector<std::vector<WriteTask>> plan_rank_work(const std::vector<OutputTensor>& tensors,
                                                   const OutputLayout& layout, int ranks);

}  // namespace vmerge
