#pragma once
#include <cstddef>
#include <vector>

#include "mapping/tensor_mapping.h"
#include "plan/rank_work.h"

namespace vmerge {

// How many distinct input files each rank's rows read from: the files it opens (and keeps
// open while it works), the metadata load a plan puts on a parallel file system.
std::vector<size_t> input_files_per_rank(const TensorMapping& mapping, const std::vector<std::vector<WriteTask>>& work);

}  // namespace vmerge
