#pragma once
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// An HF safetensors folder as it is: every tensor copied whole (also the base weights a
// Megatron LoRA adapter checkpoint is merged onto); block-FP8 weights are dequantized with
// their scales (quantized_sources.h), which adds a line to `notes` when given.
TensorMapping map_hf_safetensors(const std::string& dir, std::vector<std::string>* notes = nullptr);
// `adapter` (a checkpoint that saved only its LoRA adapter) with the HF base model in `base_dir`
// put before it, as apply_lora pairs them.
void put_lora_base_first(TensorMapping& adapter, const std::string& base_dir);
// One safetensors file as it is (a PEFT adapter_model.safetensors).
TensorMapping map_safetensors_file(const std::string& path);

}  // namespace vmerge
