#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor_mapping.h"
#include "core/tensor_ref.h"

namespace vmerge {

// The routed merge of a verl FSDP / FSDP2 DTensor save (docs/scaling.md, "Routed planning"):
// the output is planned from a skeleton (file 0's keys, each DTensor as one whole tensor of its
// global shape), and each rank then keeps only the shards its rows read. Free of MPI: the
// collectives are mpi/routed_fsdp_merge.cpp's.

// What the rank that scanned one rank file found: whether the file can take the routed path
// (same keys, dtypes and global shapes as file 0, every tensor a DTensor holding one shard
// position on a mesh of `files` ranks, nothing skipped), and what the routed merge needs of it
// later (its empty shards for the dropped-entries note, a digest of its scan for --resume).
struct FsdpFileCheck {
    size_t file = 0;           // its index in the checkpoint's files
    std::string unroutable;    // why not (empty: routable); today's all-gather path then says why
    Shape position;            // the shard position its DTensors hold
    size_t entries = 0;
    size_t empty_shards = 0;
    std::vector<std::string> empty_examples;  // "PATH key 'KEY'", the first few in entry order
    uint64_t scan_digest = 0;  // XXH64 of the file's scan as serialize_scans encodes it
};

FsdpFileCheck check_fsdp_file(const ScannedFile& file, size_t index, const ScannedFile& first, size_t files);

// Each key of file 0 (every rank file holds the same keys) to its entry's index there.
using FsdpKeyIndex = std::unordered_map<std::string, uint32_t>;
FsdpKeyIndex fsdp_key_index(const ScannedFile& first);

// The checks of every file (each rank's own, gathered) as one message and back.
std::string serialize_file_checks(const std::vector<FsdpFileCheck>& checks);
std::vector<FsdpFileCheck> deserialize_file_checks(const std::string& text);

// Every file's check, in file order: empty when the routed path may be taken, else the reason
// (one file's, or two files holding one shard position: a replica the all-gather path checks).
std::string routing_verdict(const std::vector<FsdpFileCheck>& checks, size_t files);

// File 0's scan with each DTensor entry replaced by one contiguous whole tensor of its global
// shape, whose storage names the key's index in file 0 (skeleton_key), so a mapping made
// from it says which key each output copy reads.
ScannedFile fsdp_skeleton_scan(const ScannedFile& first);

// The key each skeleton source stands for: its index in file 0.
inline size_t skeleton_key(const TensorRef& source) { return static_cast<size_t>(source.storage.byte_offset); }

// Why a mapping made from the skeleton cannot be routed ("" when it can): every source must be
// a skeleton key read exactly whole, every output a plain tensor with no LoRA delta.
std::string skeleton_unroutable(const TensorMapping& skeleton, const ScannedFile& first);

}  // namespace vmerge
