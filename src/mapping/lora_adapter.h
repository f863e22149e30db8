#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor_mapping.h"
#include "mapping/lora_hyperparameters.h"

namespace vmerge {

// The folder of the output an extracted PEFT adapter goes to (its adapter_config.json and
// adapter_model.safetensors), beside the merged base model.
inline constexpr const char* kAdapterFolder = "lora_adapter";

// What an extracted adapter's adapter_config.json states (written by
// output/peft_adapter_config.h): the modules, the hyper-parameters, and the adapter_config.json
// found beside the checkpoint, whose base_model_name_or_path, lora_dropout and task_type win.
struct ExtractedAdapter {
    std::vector<std::string> target_modules;
    std::vector<std::string> modules_to_save;
    double alpha = 0;
    int64_t r = 0;
    nlohmann::json rank_pattern = nlohmann::json::object();
    nlohmann::json alpha_pattern = nlohmann::json::object();
    bool use_rslora = false;
    nlohmann::json found_config;
    std::string base_model_name_or_path;
    std::string task_type;
};

struct LoraResult {
    bool found = false;
    size_t modules = 0;             // modules with an A/B pair
    std::vector<int64_t> ranks;     // distinct r values
    double alpha = 0;
    std::string alpha_source;
    std::optional<ExtractedAdapter> extracted;  // Extract: what its adapter_config.json states
    std::vector<std::string> notes;
};

// Finds a PEFT-wrapped state dict in `mapping` (`base_model.model.` prefix, `.base_layer.`,
// `lora_A/lora_B.<adapter>.weight`, `lora_embedding_A/B.<adapter>`, `modules_to_save`),
// refuses what cannot be merged correctly (DoRA, lora_bias, trainable tokens, other PEFT
// methods, several adapters), and rewrites the mapping: base tensors under their HF names,
// then either the adapter as `adapter` tensors with PEFT names (Extract) or a LoraDelta on
// every adapted weight and the trained modules_to_save copies in place of the originals
// (Merge). `where` names the checkpoint in errors. Without LoRA names nothing changes. Module
// paths a saved-name rule renamed (TensorMapping::peft_run_time_modules) appear in the adapter
// and its config under their run-time paths, as PEFT's own save_pretrained writes them.
LoraResult apply_lora(TensorMapping& mapping, const LoraOptions& options, const std::string& where);

}  // namespace vmerge
