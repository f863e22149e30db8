#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace vmerge {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
std::string shape_to_string(const Shape& shape);

// How one mesh dimension splits (or not) a DTensor (docs/reference/torch-formats.md §2.2, §3).
struct Placement {
    enum class Kind { Shard, StridedShard, Replicate, Partial };
    Kind kind = Kind::Replicate;
    int64_t dim = 0;
    int64_t split_factor = 1;  // StridedShard only
    std::string reduce_op;     // Partial only
};
std::string placement_to_string(const Placement& placement);

struct DTensorLayout {
    Shape global_shape;
    Shape mesh_shape;
    std::vector<std::string> mesh_dim_names;
    Shape coordinates;  // the saving rank's coordinate on each mesh dim
    std::vector<Placement> placements;
};

// The bytes of one torch storage: a record of a torch.save archive inside `file`.
struct StorageRef {
    std::string file;
    std::string key;          // "data/<key>" record name
    uint64_t byte_offset = 0; // absolute offset in `file`
    uint64_t byte_size = 0;
    // The record's CRC-32 from the ZIP central directory (none for bytes outside a ZIP
    // record, e.g. a simulated checkpoint): the copy checks the bytes it reads against it.
    std::optional<uint32_t> crc32;
};

// The element count of `shape` when it fits in int64 (sizes are >= 0); nullopt on overflow, so
// a hostile shape cannot wrap around into a small "fitting" count.
std::optional<int64_t> checked_numel(const Shape& shape);

// Row-major strides (elements) of a contiguous tensor of `shape` (a 0-sized dim counts as 1).
Shape contiguous_strides(const Shape& shape);

// A tensor as it is stored: a strided view of a storage. Offsets and strides in elements.
struct TensorRef {
    DType dtype = DType::F32;
    Shape shape;
    Shape stride;
    int64_t storage_offset = 0;
    StorageRef storage;
    std::optional<DTensorLayout> dtensor;

    bool is_contiguous() const;
    uint64_t nbytes() const { return static_cast<uint64_t>(numel(shape)) * element_size(dtype); }
};

struct StateDictEntry {
    std::string key;
    TensorRef tensor;
    int chunk = 0;  // model chunk: verl's list index or Megatron-LM's modelN (virtual pipeline)
};

// A state-dict key whose value is not a tensor, and what it holds (pickle::describe: "int",
// "str", "dict", "some.Class(...)"): the source ledger drops or refuses it.
struct SkippedEntry {
    std::string key;
    std::string kind;
};

// What scanning one rank file yields: its tensors in state-dict order, and the keys that
// hold something else (ints, strings, nested objects).
struct ScannedFile {
    std::string path;
    std::vector<StateDictEntry> tensors;
    std::vector<SkippedEntry> skipped;
    int chunks = 1;
    // JSON text of the non-tensor facts a backend's own scan keeps (DeepSpeed's param_shapes,
    // partition counts); empty for the plain torch scan.
    std::string metadata;
};

// A view of `t` with dimension `dim` fixed at `index` (the dimension disappears).
TensorRef select_dim(const TensorRef& t, size_t dim, int64_t index);

}  // namespace vmerge
