#include "hdf5/row_selection.h"

#include <vector>

namespace vmerge {

H5Handle select_rows(hid_t file_space, const Shape& shape, int64_t row_begin, int64_t row_end, const std::string& what) {
    if (row_end <= row_begin) {
        checked(H5Sselect_none(file_space), what);
        const hsize_t one = 1;
        H5Handle memory_space = checked(H5Screate_simple(1, &one, nullptr), H5Sclose, what);
        checked(H5Sselect_none(memory_space), what);
        return memory_space;
    }
    if (shape.empty()) return checked(H5Screate(H5S_SCALAR), H5Sclose, what);
    std::vector<hsize_t> start(shape.size(), 0), count(shape.begin(), shape.end());
    start[0] = static_cast<hsize_t>(row_begin);
    count[0] = static_cast<hsize_t>(row_end - row_begin);
    checked(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr), what);
    return checked(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose, what);
}

}  // namespace vmerge
