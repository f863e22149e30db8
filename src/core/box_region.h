#pragma once
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// Copies that fill box [dst_start, dst_start+extent) of an output from region
// [start, start+extent) of `assembled`, a tensor described by its own box copies (a
// Megatron tensor merged over TP, a stacked dist-ckpt tensor, ...). Composing box copies
// this way keeps every rule a pure function of metadata.
void extract_region(const OutputTensor& assembled, const Shape& start, const Shape& extent,
                    const Shape& dst_start, std::vector<BoxCopy>& out);

// Adds a box copy (skipped when empty).
void add_copy(OutputTensor& t, uint32_t source, Shape src_start, Shape dst_start, Shape extent);

}  // namespace vmerge
