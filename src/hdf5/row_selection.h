#pragma once
#include <cstdint>
#include <string>

#include "hdf5/hdf5_handle.h"
#include "core/tensor_ref.h"

namespace vmerge {

// Selects rows [row_begin, row_end) of a dataset of `shape` in `file_space` and returns the
// matching memory dataspace (a scalar for a 0-d tensor; an empty selection when there are no
// rows, so a rank with nothing to write can still join a collective write).
H5Handle select_rows(hid_t file_space, const Shape& shape, int64_t row_begin, int64_t row_end, const std::string& what);

}  // namespace vmerge
