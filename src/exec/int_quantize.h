#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "mapping/quantization.h"

namespace vmerge {

// compressed-tensors `pack-quantized` int4/int8 round to nearest (docs/quantization.md,
// "Arithmetic"), on rows of one weight [rows, cols] given as binary32 values (exactly the weight
// as the unquantized merge writes it). Writes the packed int32 words (rows x ceil(cols*bits/32)),
// the scales in `scale_dtype` (rows x groups) and the zero points as plain ints (rows x groups;
// all 0 when symmetric), and adds the error. Refuses (Error naming `tensor`, the row from
// `first_row` on, the column and the value) a NaN or infinite weight, as every quantizer does
// (finite_weights.h); scales follow quantization_scale.h.
void quantize_rows(const float* x, int64_t rows, int64_t cols, const QuantizeSpec& spec, DType scale_dtype,
                   uint32_t* packed, unsigned char* scales, int32_t* zero_points, QuantError& error,
                   const std::string& tensor, int64_t first_row);

// Packs zero points of `rows` rows (rows x groups ints) along dim 0 as compressed-tensors does:
// out has ceil(rows*bits/32) x groups int32 words.
void pack_zero_points(const int32_t* zero_points, int64_t rows, int64_t groups, int bits, uint32_t* out);

}  // namespace vmerge
