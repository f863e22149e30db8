#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"
#include "plan/output_layout.h"

namespace vmerge {

// Where an extracted LoRA adapter's weights go, relative to the output folder (inside
// kAdapterFolder, mapping/lora_adapter.h, beside its adapter_config.json).
inline constexpr const char* kAdapterWeightsFile = "lora_adapter/adapter_model.safetensors";

// The safetensors files of a merged folder: model.safetensors, or model-0000K-of-0000N.safetensors
// shards, and kAdapterWeightsFile, each beginning with its safetensors_header.
FileFormat safetensors_file_format();
// plan_output_layout with safetensors_file_format().
OutputLayout plan_safetensors_layout(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size);

// The safetensors header for a list of (name, dtype, shape) in data order, with
// {"format":"pt"} metadata, padded with spaces to a multiple of 8; includes the 8-byte length.
std::string safetensors_header(const std::vector<const OutputTensor*>& tensors,
                               const std::string& file = "model.safetensors");

// model.safetensors.index.json text (sorted keys, 2-space indent, trailing newline); the
// model's tensors only.
std::string index_json(const std::vector<OutputTensor>& tensors, const OutputLayout& layout);

}  // namespace vmerge
