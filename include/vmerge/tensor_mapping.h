#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vmerge/tensor_ref.h"

namespace vmerge {

// "These elements of that source tensor go to this box of this output tensor": the one
// operation every merge rule is expressed in (DESIGN.md §4, map).
struct BoxCopy {
    uint32_t source = 0;   // index into TensorMapping::sources
    Shape src_start;       // in the source tensor's own (local) coordinates
    Shape dst_start;       // in the output tensor
    Shape extent;
};

struct OutputTensor {
    std::string name;
    DType source_dtype = DType::F32;  // every source of one output shares it
    DType dtype = DType::F32;         // as written
    Shape shape;
    std::vector<BoxCopy> copies;
    // Elements no copy covers are zeros (a Megatron vocabulary shorter than config.json's).
    bool zero_fill = false;

    uint64_t nbytes() const { return static_cast<uint64_t>(numel(shape)) * element_size(dtype); }
};

struct TensorMapping {
    std::vector<TensorRef> sources;
    std::vector<OutputTensor> tensors;  // in output (state dict) order
};

// Throws Error unless the copies of `t` stay inside their source and output tensors and
// cover every output element exactly once.
void check_copies_tile_output(const OutputTensor& t, const std::vector<TensorRef>& sources);

}  // namespace vmerge
