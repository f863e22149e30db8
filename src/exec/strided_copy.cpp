#include "exec/strided_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace vmerge {
namespace {

// Tiles of 32 x 32 elements: 32 source lines and 32 destination lines stay in L1 while a tile
// is transposed (at 8 bytes an element: 16 KiB).
constexpr int64_t kTile = 32;

// One plane [rows, cols]: destination rows contiguous, source with any row and column stride.
// Templated on the element size so that each element is one load and one store.
template <size_t N>
void copy_plane(const unsigned char* from, int64_t from_row, int64_t from_col, unsigned char* to, int64_t to_row,
                int64_t rows, int64_t cols) {
    if (from_col == 1) {
        for (int64_t r = 0; r < rows; ++r) std::memcpy(to + r * to_row * N, from + r * from_row * N, cols * N);
        return;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
            const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c)
                    std::memcpy(to + (r * to_row + c) * N, from + (r * from_row + c * from_col) * N, N);
        }
}

void copy_plane(size_t esize, const unsigned char* from, int64_t from_row, int64_t from_col, unsigned char* to,
                int64_t to_row, int64_t rows, int64_t cols) {
    switch (esize) {
        case 1: return copy_plane<1>(from, from_row, from_col, to, to_row, rows, cols);
        case 2: return copy_plane<2>(from, from_row, from_col, to, to_row, rows, cols);
        case 4: return copy_plane<4>(from, from_row, from_col, to, to_row, rows, cols);
        case 8: return copy_plane<8>(from, from_row, from_col, to, to_row, rows, cols);
        default:
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    std::memcpy(to + (r * to_row + c) * esize, from + (r * from_row + c * from_col) * esize, esize);
    }
}

}  // namespace

void copy_strided_box(const unsigned char* from, const Shape& from_stride, unsigned char* to, const Shape& to_stride,
                      const Shape& extent, size_t element_size) {
    const size_t ndim = extent.size();
    if (ndim == 0) {
        std::memcpy(to, from, element_size);
        return;
    }
    for (int64_t e : extent)
        if (e == 0) return;
    // The plane: the last two axes (one row of the last axis for a 1-D box).
    const int64_t cols = extent[ndim - 1], from_col = from_stride[ndim - 1];
    const int64_t rows = ndim >= 2 ? extent[ndim - 2] : 1;
    const int64_t from_row = ndim >= 2 ? from_stride[ndim - 2] : 0, to_row = ndim >= 2 ? to_stride[ndim - 2] : 0;
    const size_t outer = ndim >= 2 ? ndim - 2 : 0;
    std::vector<int64_t> index(outer, 0);
    while (true) {
        int64_t s = 0, t = 0;
        for (size_t d = 0; d < outer; ++d) {
            s += index[d] * from_stride[d];
            t += index[d] * to_stride[d];
        }
        copy_plane(element_size, from + s * static_cast<int64_t>(element_size), from_row, from_col,
                   to + t * static_cast<int64_t>(element_size), to_row, rows, cols);
        size_t d = outer;
        while (d > 0) {
            --d;
            if (++index[d] < extent[d]) break;
            index[d] = 0;
            if (d == 0) return;
        }
        if (outer == 0) return;
    }
}

}  // namespace vmerge
