#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// Where things live in model.h5 (docs/hdf5.md), for the writer and the reader alike. Pure rules,
// no HDF5 calls.

constexpr const char* kArchiveFileName = "model.h5";
// The config, generation config and tokenizer files, byte for byte, one uint8 dataset each.
constexpr const char* kArchiveFilesGroup = "hf_files";
// The dataset path of an HF tensor name: dots become groups,
// "model.layers.0.self_attn.q_proj.weight" -> "model/layers/0/self_attn/q_proj/weight".
// Throws Error for a name that cannot be one (a '/', an empty component).
std::string archive_dataset_path(const std::string& hf_name);

// Checks that the tensors' dataset paths can all exist in one file: no path is the group of
// another, none lies under the files group. Throws Error naming the two tensors.
void check_archive_paths(const std::vector<OutputTensor>& tensors);

}  // namespace vmerge
