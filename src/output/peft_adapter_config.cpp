#include "output/peft_adapter_config.h"

#include <cmath>

namespace vmerge {
namespace {

// A whole number as an integer (PEFT writes lora_alpha 16, not 16.0).
nlohmann::json json_number(double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return static_cast<int64_t>(x);
    return x;
}

}  // namespace

nlohmann::json peft_adapter_config(const ExtractedAdapter& a) {
    const nlohmann::json& f = a.found_config;
    const std::vector<std::string>& saved = a.modules_to_save;
    auto found_or = [&](const char* key, nlohmann::json fallback) {
        return f.is_object() && f.contains(key) ? f[key] : fallback;
    };
    return {
        {"alpha_pattern", a.alpha_pattern},
        {"auto_mapping", nullptr},
        {"base_model_name_or_path", found_or("base_model_name_or_path", a.base_model_name_or_path)},
        {"bias", "none"},
        {"corda_config", nullptr},
        {"ensure_weight_tying", false},
        {"eva_config", nullptr},
        {"exclude_modules", nullptr},
        {"fan_in_fan_out", false},
        {"inference_mode", true},
        {"init_lora_weights", true},
        {"layer_replication", nullptr},
        {"layers_pattern", nullptr},
        {"layers_to_transform", nullptr},
        {"loftq_config", nlohmann::json::object()},
        {"lora_alpha", json_number(a.alpha)},
        {"lora_bias", false},
        {"lora_dropout", found_or("lora_dropout", 0.0)},
        {"megatron_config", nullptr},
        {"megatron_core", "megatron.core"},
        {"modules_to_save", saved.empty() ? nlohmann::json(nullptr) : nlohmann::json(saved)},
        {"peft_type", "LORA"},
        {"qalora_group_size", 16},
        {"r", a.r},
        {"rank_pattern", a.rank_pattern},
        {"revision", nullptr},
        {"target_modules", a.target_modules},
        {"target_parameters", nullptr},
        {"task_type", found_or("task_type", a.task_type)},
        {"trainable_token_indices", nullptr},
        {"use_dora", false},
        {"use_qalora", false},
        {"use_rslora", a.use_rslora},
    };
}

}  // namespace vmerge
