#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mapping/tensor_mapping.h"

namespace vmerge {

struct OutputFile {
    std::string name;           // model.safetensors or model-0000K-of-0000N.safetensors
    std::string header;         // the 8-byte length + padded JSON, written by rank 0
    std::vector<size_t> tensors;  // indices into the tensor list, in data-offset order
    uint64_t size = 0;          // whole file size
};

struct TensorLocation {
    size_t file = 0;
    uint64_t offset = 0;  // absolute byte offset of the tensor's data in its file
};

// Where every byte of the output goes, decided before any byte is written.
struct OutputLayout {
    std::vector<OutputFile> files;
    std::vector<TensorLocation> locations;  // by tensor index
    uint64_t total_size = 0;                // sum of tensor bytes, adapter included
    size_t model_files = 0;                 // files[0, model_files) are the model's shards
};

// Where an extracted LoRA adapter's tensors go, relative to the output folder.
inline constexpr const char* kAdapterFolder = "lora_adapter";
inline constexpr const char* kAdapterWeightsFile = "lora_adapter/adapter_model.safetensors";

// Splits the tensors into shards greedily in their order, as transformers does: a shard is
// closed when the next tensor would push it past `max_shard_size`; a bigger tensor goes
// alone. Within a file tensors are ordered by element size (descending) then name, so every
// tensor starts aligned to its element size, as the safetensors writer does. Adapter tensors
// (OutputTensor::adapter) go to one more file, kAdapterWeightsFile, after the model's.
OutputLayout plan_output_layout(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size);

// The safetensors header for a list of (name, dtype, shape) in data order, with
// {"format":"pt"} metadata, padded with spaces to a multiple of 8; includes the 8-byte length.
std::string safetensors_header(const std::vector<const OutputTensor*>& tensors,
                               const std::string& file = "model.safetensors");

// model.safetensors.index.json text (sorted keys, 2-space indent, trailing newline); the
// model's tensors only.
std::string index_json(const std::vector<OutputTensor>& tensors, const OutputLayout& layout);

}  // namespace vmerge
