#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

namespace vmerge {

// One contiguous run of a tensor dimension: local positions [local, local+length) hold
// global indices [global, global+length).
struct DimRun {
    int64_t local = 0;
    int64_t global = 0;
    int64_t length = 0;
};

// torch.chunk rule (docs/reference/torch-formats.md §3.1): piece `index` of `count` pieces of
// `size` items. Returns {start, length}; leading pieces are full, then a partial one, then
// empty ones.
std::pair<int64_t, int64_t> chunk_range(int64_t size, int64_t count, int64_t index);

// The global indices a DTensor shard holds along each tensor dim, in local order, from its
// placements and mesh coordinates applied left to right (Shard, _StridedShard; Replicate
// keeps everything). Partial is an Error: it is not a piece of the tensor but a summand.
std::vector<std::vector<DimRun>> dtensor_runs(const DTensorLayout& layout, const std::string& where);

// Every number of a DTensor layout read from a pickle within bounds, else Error naming
// `where`: mesh dims >= 1 and at most kMaxWorldSize ranks in all; a _StridedShard's split
// factor from 1 to kMaxWorldSize, all split factors together too (torch sets one to the
// product of the sizes of the mesh dims that shard the tensor dim after it, which may lie
// outside the saved mesh), so the splitting loops stay bounded.
void check_dtensor_layout(const DTensorLayout& layout, const std::string& where);

// Where the shard lies: the saving rank's coordinates with every Replicate mesh dim's set to
// 0, the same for every copy of one shard.
Shape shard_position(const DTensorLayout& layout);

}  // namespace vmerge
