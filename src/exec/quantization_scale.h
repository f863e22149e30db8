#pragma once
#include "core/dtype.h"

namespace vmerge {

// The one scale rule of every quantizer (docs/quantization.md, "NaN, infinity and tiny scales"),
// compressed-tensors' (calculate_qparams: the scale is computed in the weight dtype, and a zero
// scale becomes that dtype's eps "to prevent div by 0"): `computed` (finite, >= 0) is rounded to
// nearest even in the scale dtype `dtype` (BF16, F16 or F32) and written to `stored`; a scale
// that is zero THERE, because the group is all zero or because its values are so small that
// amax / qmax underflows the dtype, is stored as eps(dtype) instead. Returns the stored value,
// which is the one the codes are computed with, so dequantizing the file gives what was measured.
float store_scale(float computed, DType dtype, unsigned char* stored);

// The machine epsilon of a scale dtype: BF16 2^-7, F16 2^-10, F32 (and anything else) 2^-23.
float scale_eps(DType dtype);

}  // namespace vmerge
