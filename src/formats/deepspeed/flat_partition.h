#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

// How ZeRO keeps parameters: flattened, concatenated into flat fp32 runs and cut into rank
// partitions (deepspeed-formats.md §4, §5). Pure functions: where each parameter's elements lie.
namespace vmerge {

// A box of a row-major tensor: its first index and its extent on every dimension.
struct IndexBox {
    Shape start;
    Shape extent;
};

// The boxes of a row-major tensor of `shape` that together hold its flat elements
// [begin, end), in flat order, each contiguous in that order (a partial row, whole rows, a
// partial row, on every level): a flat run with boundaries anywhere becomes few box copies.
std::vector<IndexBox> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end);

// One run of a parameter's (flattened) elements that lies inside one flat tensor.
struct FlatSlice {
    size_t flat = 0;           // which flat tensor
    int64_t flat_offset = 0;   // its first element there
    int64_t param_offset = 0;  // its first element in the parameter
    int64_t length = 0;
    bool operator==(const FlatSlice&) const = default;
};

// Where elements [begin, end) of the concatenation of flats of `lengths` lie: one slice per
// flat touched, `flat` counted from `first_flat`, `param_offset` from `param_base`.
std::vector<FlatSlice> slices_of_concatenation(const std::vector<int64_t>& lengths, int64_t begin, int64_t end,
                                               int64_t param_base, size_t first_flat = 0);

struct FlatParam {
    std::string name;
    Shape shape;
};

// ZeRO-1/2, one parameter group: its parameters lie one after the other in the concatenation
// of the ranks' saved partitions (alignment padding, at the group's end, already stripped),
// parameter i followed by `param_paddings[i]` elements of padding when given (DeepSpeed's
// parameter_alignment; empty: none); `rank_lengths[r]` is rank r's saved length
// (slice.flat = rank). Error (naming `where`) unless the parameters and their paddings use the
// partitions up to DeepSpeed's 2·W alignment, or the paddings are not one per parameter.
std::vector<std::vector<FlatSlice>> zero2_group_slices(const std::vector<FlatParam>& params,
                                                       const std::vector<int64_t>& rank_lengths, const std::string& where,
                                                       const std::vector<int64_t>& param_paddings = {});

// ZeRO-3: parameter i (in param_shapes order over all sub-groups) is cut into W pieces of
// ps = ceil(N/W); rank r's piece sits at offset sum(ps of earlier parameters) of the
// concatenation of rank r's sub-group flats and holds elements [r·ps, min(N, (r+1)·ps)).
// `flat_lengths[r]` lists rank r's flats; slice.flat = r·(flats per rank) + flat index.
// Error unless every rank's flats add up to exactly the parameters' pieces.
std::vector<std::vector<FlatSlice>> zero3_slices(const std::vector<FlatParam>& params,
                                                 const std::vector<std::vector<int64_t>>& flat_lengths,
                                                 const std::string& where);

// The first N elements of W fragments concatenated in rank order (ZeRO-3 frozen parameters,
// each rank's ps-element piece with its padding; ZeRO-2: one fragment of N).
std::vector<FlatSlice> fragment_slices(const std::vector<int64_t>& fragment_lengths, int64_t numel,
                                       const std::string& where);

}  // namespace vmerge
