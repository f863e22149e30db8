#pragma once
#include <vector>

#include "comm.h"
#include "core/tensor_mapping.h"
#include "plan/rank_work.h"

namespace vmerge {

// Before the copy: every rank fingerprints the input files its `tasks` read and its share of
// all of them (io/input_fingerprint.h); all ranks must see the same bytes under each name,
// and no two names may hold the same bytes. Error (on every rank) naming the file(s) otherwise.
void check_input_files(const TensorMapping& mapping, const std::vector<WriteTask>& tasks, Comm& comm);

}  // namespace vmerge
