#pragma once
#include <vector>

#include "core/tensor_mapping.h"
#include "core/tensor_ref.h"
#include "plan/rank_work.h"
#include "plan/storage_readers.h"

namespace vmerge {

// The routed FSDP merge's two sides of the exchange (routed_fsdp_merge.h), without the
// exchange itself: which ranks read each shard a rank scanned, and a rank's mapping from the
// shards it received. `first` is file 0's scan, `skeleton` the mapping of its skeleton
// (formats/fsdp/fsdp_routing.h).

// The readers of each stored record of `mine` (this rank's scanned files): the ranks whose
// rows in `work` the record's shard meets, through the skeleton mapping's copies.
StorageReaders fsdp_shard_readers(const std::vector<ScannedFile>& mine, const ScannedFile& first,
                                  const TensorMapping& skeleton, const std::vector<std::vector<WriteTask>>& work);

// The rank's mapping: the skeleton's output tensors, with copies composed from the `received`
// shards (each shard box intersected with the skeleton copy it falls in) and the received
// shards as sources. The copies of each of `tasks`' rows must tile them exactly (an Error
// naming the tensor and rows otherwise); other rows may be partly covered or not at all.
TensorMapping compose_routed_mapping(const TensorMapping& skeleton, const ScannedFile& first,
                                     const std::vector<ScannedFile>& received, const std::vector<WriteTask>& tasks);

// What a rank's mapping keeps in memory, about: the output tensors every rank holds (`whole`),
// and its share (`share`: the sources it received, with their storage names, shapes and DTensor
// layouts, and the copies from them), which shrinks as 1 / ranks. The routed merge bounds their
// sum by the rank's budget (routed_fsdp_merge.h).
struct MetadataBytes {
    uint64_t whole = 0;
    uint64_t share = 0;
};
MetadataBytes mapping_metadata_bytes(const TensorMapping& mapping);

// "" when the metadata fits `budget`; else the Error text: the share's entries and metadata,
// the budget, and how many ranks would fit it (or that none would: the output tensors alone
// exceed it).
std::string metadata_over_budget(size_t entries, const MetadataBytes& bytes, uint64_t budget, int ranks);

}  // namespace vmerge
