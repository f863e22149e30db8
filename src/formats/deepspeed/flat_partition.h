#pragma once
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

// How ZeRO keeps parameters: flattened, concatenated into flat fp32 runs and cut into rank
// partitions (docs/reference/deepspeed-formats.md §4, §5). Pure functions: where each parameter's
// elements lie.
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

// ZeRO-1/2, one parameter group as DeepSpeedZeroOptimizer lays it out (stage_1_and_2.py):
// its `group_elements` (the parameters' elements plus their parameter_alignment paddings) are
// padded to a multiple of 2·W and cut into W partitions of `partition` elements; rank r saves
// its partition without that padding, `saved[r]` = min(partition, max(0, group_elements - r·partition)).
struct Zero2Layout {
    int64_t group_elements = 0;
    int64_t partition = 0;
    std::vector<int64_t> saved;
};
Zero2Layout zero2_layout(int64_t group_elements, size_t world);

// ZeRO-1/2, one parameter group: its parameters lie one after the other in the concatenation
// of the ranks' saved partitions, parameter i followed by `param_paddings[i]` elements of
// padding when given (DeepSpeed's parameter_alignment; empty: none); `rank_lengths[r]` is rank
// r's saved length (slice.flat = rank). Error, naming `rank_files[r]`, `group` and both
// sizes, unless every rank saved exactly zero2_layout's length; Error (naming rank 0's file,
// where the paddings are read) unless the paddings are one per parameter and exactly what
// aligning each parameter's end to 1, 2, 4, 8 or 16 elements gives (none after the last).
struct Zero2Group {
    std::vector<std::vector<FlatSlice>> params;  // per parameter
    Zero2Layout layout;
};
Zero2Group zero2_group_slices(const std::vector<FlatParam>& params, const std::vector<int64_t>& rank_lengths,
                              const std::vector<std::string>& rank_files, const std::string& group,
                              const std::vector<int64_t>& param_paddings = {});

// ZeRO-3: every parameter (in param_shapes order over the sub-groups `groups`) is cut into W
// pieces of ps = ceil(N/W); rank r's flat g is the concatenation of the pieces of sub-group g's
// parameters, and piece r holds elements [r·ps, min(N, (r+1)·ps)) (padding past N).
// `flat_lengths[r][g]` is rank r's flat g; slice.flat = r·(number of groups) + g.
struct Zero3Slices {
    std::vector<std::vector<FlatSlice>> params;  // per parameter, in order over the groups
    std::vector<size_t> padding_only;            // flats (numbered like slice.flat) holding padding only
};
// Error, naming `rank_files[r]`, the flat group and both sizes, unless rank r holds exactly one
// flat per sub-group of exactly the sum of its parameters' ps.
Zero3Slices zero3_slices(const std::vector<std::vector<FlatParam>>& groups,
                         const std::vector<std::vector<int64_t>>& flat_lengths, const std::vector<std::string>& rank_files);

// A parameter saved as W fragments, one per rank, in rank order (ZeRO-3 frozen parameters:
// each rank's ps = ceil(N/W) piece with its padding; ZeRO-2: one fragment of all N): the
// slices of its N elements. Error, naming `rank_files[r]`, `name` and both sizes, unless every
// fragment holds exactly ps elements.
std::vector<FlatSlice> fragment_slices(const std::vector<int64_t>& fragment_lengths, int64_t numel,
                                       const std::vector<std::string>& rank_files, const std::string& name);

}  // namespace vmerge
