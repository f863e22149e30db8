#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

struct OutputFile {
    std::string name;           // e.g. model-0000K-of-0000N.safetensors (FileFormat::model_file_name)
    std::string header;         // FileFormat::header: e.g. the safetensors 8-byte length + padded JSON
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

// What the planner needs of a file format, which it does not otherwise know: the names of
// its files and the bytes each begins with (its header), given the tensors it holds in data
// order. No `header`: the files begin with their first tensor.
struct FileFormat {
    std::function<std::string(size_t shard, size_t shards)> model_file_name;
    std::string adapter_file;  // the file OutputTensor::adapter tensors go to
    std::function<std::string(const std::vector<const OutputTensor*>&, const std::string& file)> header;
};

// Splits the tensors into shards greedily in their order, as transformers does: a shard is
// closed when the next tensor would push it past `max_shard_size`; a bigger tensor goes
// alone. Within a file tensors are ordered by element size (descending) then name, so every
// tensor starts aligned to its element size, as the safetensors writer does. Adapter tensors
// (OutputTensor::adapter) go to one more file, `format.adapter_file`, after the model's.
// Pure: every rank plans the same layout.
OutputLayout plan_output_layout(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size,
                                const FileFormat& format);

}  // namespace vmerge
