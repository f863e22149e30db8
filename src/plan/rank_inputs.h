#pragma once
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"
#include "plan/rank_work.h"

namespace vmerge {

// A copy feeds rows [row_begin, row_end) of its output tensor when its box meets them on dim 0
// (a 0-d tensor's one copy feeds its one row).
bool feeds_rows(const OutputTensor& t, const BoxCopy& c, const WriteTask& task);

// The input files `tasks` read from (their tensors' copies and LoRA factors).
std::set<std::string> input_files_of(const TensorMapping& mapping, const std::vector<WriteTask>& tasks);

// Every input file the mapping reads bytes of, each once (a rank file whose shards are all
// empty is read for nothing).
std::set<std::string> input_files_of(const TensorMapping& mapping);

// How many distinct input files each rank's rows read from: the files it opens (and keeps
// open while it works), the metadata load a plan puts on a parallel file system.
std::vector<size_t> input_files_per_rank(const TensorMapping& mapping, const std::vector<std::vector<WriteTask>>& work);

}  // namespace vmerge
