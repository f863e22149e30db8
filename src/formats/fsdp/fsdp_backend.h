#pragma once
#include <string>
#include <vector>

#include "formats/source_ledger.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// A verl FSDP actor folder: model_world_size_{W}_rank_{R}.pt, fsdp_config.json, huggingface/.
struct FsdpCheckpoint {
    std::string dir;
    int world_size = 0;
    bool world_size_inferred = false;  // no fsdp_config.json (older verl): taken from names
    std::vector<std::string> rank_files;  // index = rank
    std::vector<std::string> notes;       // what the user should know about the detection
};

bool looks_like_fsdp(const std::string& dir);
// Lists the folder and checks that every rank file of the world size is there.
FsdpCheckpoint discover_fsdp(const std::string& dir);

// The model name of an FSDP state-dict key: the wrappers' segments (`_fsdp_wrapped_module.`,
// `_checkpoint_wrapped_module.`, torch.compile's `_orig_mod.`) and a leading DDP `module.` removed.
std::string fsdp_model_name(const std::string& key);

// The boxes one rank's shard of a DTensor holds (source 0): src_start in the shard, dst_start
// in the global tensor; none for an empty shard. An Error naming `where` when the shard's shape
// is not what its placements give.
std::vector<BoxCopy> dtensor_shard_boxes(const TensorRef& shard, const std::string& where);

// FSDP merge rules: each DTensor shard lands where its placements put it (replicas read
// once, and dropped as such in `ledger`), plain tensors are concatenated on dim 0 in rank
// order. `files[r]` is rank r's scan. Output names are fsdp_model_name of the keys; two keys
// with one name are an Error.
TensorMapping map_fsdp(const std::vector<ScannedFile>& files, SourceLedger* ledger = nullptr);

}  // namespace vmerge
