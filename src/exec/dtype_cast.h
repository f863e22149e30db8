#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace vmerge {

// Converts `count` elements. Narrowing rounds to nearest even, as torch's .to() does;
// F32 -> BF16 maps every NaN to 0xFFFF as torch's CPU kernels do. Overflow gives infinity.
void cast_elements(const void* src, DType from, void* dst, DType to, size_t count);

// dst = the `from` values rounded to `through` (BF16/F16/F32; exactly as casting to it and
// back), as fp32: what a quantizer reads. One pass, with fast loops for F32/BF16 sources.
void round_through(const void* src, DType from, DType through, float* dst, size_t count);

}  // namespace vmerge
