#pragma once
#include <cstddef>

#include "core/tensor_ref.h"

namespace vmerge {

// Copies a box of `extent` elements of `element_size` bytes from `from`, laid out with the
// strides `from_stride` (elements, any order: a transposed view has unit stride on an axis
// other than the last), into `to`, laid out with `to_stride` whose last axis is contiguous.
// The last two axes are copied in square tiles when the source's last axis is not contiguous,
// so a transposed source costs cache lines per tile, not one per element.
void copy_strided_box(const unsigned char* from, const Shape& from_stride, unsigned char* to, const Shape& to_stride,
                      const Shape& extent, size_t element_size);

}  // namespace vmerge
