#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// Where things live in model.h5 (docs/hdf5.md). Pure rules, no HDF5 calls.

constexpr const char* kArchiveFileName = "model.h5";
// The config, generation config and tokenizer files, byte for byte, one uint8 dataset each.
constexpr const char* kArchiveFilesGroup = "hf_files";
// Chunks of compressed datasets hold about this many bytes (whole rows): large enough for the
// codec, small enough that several fit one rank's --max-memory.
constexpr uint64_t kArchiveChunkBytes = 4ull << 20;

// The dataset path of an HF tensor name: dots become groups,
// "model.layers.0.self_attn.q_proj.weight" -> "model/layers/0/self_attn/q_proj/weight".
// Throws Error for a name that cannot be one (a '/', an empty component).
std::string archive_dataset_path(const std::string& hf_name);

// Checks that the tensors' dataset paths can all exist in one file: no path is the group of
// another, none lies under the files group. Throws Error naming the two tensors.
void check_archive_paths(const std::vector<OutputTensor>& tensors);

// Rows per chunk of a compressed dataset, 0 for one stored contiguous (a 0-d or empty tensor:
// HDF5 chunks need a non-empty, at least 1-d shape). Rank work is split at multiples of it so
// every chunk has one writer.
int64_t archive_chunk_rows(const OutputTensor& t, uint64_t chunk_bytes = kArchiveChunkBytes);

}  // namespace vmerge
