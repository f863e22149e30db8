#pragma once
#include <nlohmann/json.hpp>

#include "mapping/lora_adapter.h"

namespace vmerge {

// The adapter_config.json PEFT loads an extracted adapter with (written into kAdapterFolder
// beside its adapter_model.safetensors): every key PEFT's LoraConfig saves, with the found
// file's base_model_name_or_path, lora_dropout and task_type when there was one.
nlohmann::json peft_adapter_config(const ExtractedAdapter& adapter);

}  // namespace vmerge
