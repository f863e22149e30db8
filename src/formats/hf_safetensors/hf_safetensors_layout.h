#pragma once
#include <string>

#include "core/tensor_mapping.h"

namespace vmerge {

// An HF safetensors folder as it is: every tensor copied whole (also the base weights a
// Megatron LoRA adapter checkpoint is merged onto).
TensorMapping map_hf_safetensors(const std::string& dir);
// One safetensors file as it is (a PEFT adapter_model.safetensors).
TensorMapping map_safetensors_file(const std::string& path);

}  // namespace vmerge
