#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/small_file.h"

namespace vmerge {

// What to do with a LoRA adapter found in a checkpoint: write the base model plus a PEFT
// adapter folder, or fold the adapter into the base weights.
enum class LoraMode { Extract, Merge };

// The training-time adapter facts found beside a checkpoint (read once, by rank 0):
// <dir>/lora_adapter/adapter_config.json and the first of <dir>/lora_train_meta.json and
// <dir>/../lora_train_meta.json that exists (verl >= 2026-02).
struct LoraMetadataFiles {
    SmallFile adapter_config;
    SmallFile train_meta;
};
// `adapter_config`, when given, is read instead of <dir>/lora_adapter/adapter_config.json (an
// adapter export elsewhere in the checkpoint).
LoraMetadataFiles read_lora_metadata(const std::string& checkpoint_dir, const std::string& adapter_config = "");
std::string serialize_lora_metadata(const LoraMetadataFiles& files);
LoraMetadataFiles deserialize_lora_metadata(const std::string& text);

struct LoraOptions {
    LoraMode mode = LoraMode::Extract;
    std::optional<double> alpha;        // --lora_alpha: wins over what is found on disk
    std::optional<bool> use_rslora;     // --use_rslora: scale alpha/sqrt(r) instead of alpha/r
    // Searched for the training-time adapter facts: <dir>/lora_adapter/adapter_config.json
    // (verl's PPO worker), <dir>/lora_train_meta.json and <dir>/../lora_train_meta.json (verl
    // >= 2026-02).
    std::string checkpoint_dir;
    // A PEFT adapter export's adapter_config.json read instead of <dir>/lora_adapter/'s (HF
    // Trainer's checkpoint-N/ beside a DeepSpeed save; empty: none).
    std::string adapter_config;
    // The files above as read by another rank; without them apply_lora reads them itself.
    std::optional<LoraMetadataFiles> metadata;
    // Why the checkpoint records no alpha (Megatron-Bridge shards): the missing-alpha error says it.
    std::string alpha_unrecorded;
    // adapter_config.json's task_type when no file found beside the checkpoint records one:
    // TOKEN_CLS for a value model (--is_value_model, a *ForTokenClassification config); empty:
    // apply_lora decides from the model's head (score.weight without lm_head.weight: TOKEN_CLS).
    std::string task_type;
    std::string base_model_name_or_path;  // used when no found adapter config names one
};

// The alpha, rsLoRA switch and patterns an adapter was trained with, and where they came from.
struct LoraHyperparameters {
    double alpha = 0;
    bool use_rslora = false;
    std::optional<int64_t> r;  // the configured rank, when a file records it
    nlohmann::json rank_pattern = nlohmann::json::object();
    nlohmann::json alpha_pattern = nlohmann::json::object();
    nlohmann::json found_config;  // the adapter_config.json found beside the checkpoint, if any
    std::string train_meta_task_type;  // lora_train_meta.json's task_type (verl: the LoraConfig's)
    std::string source;           // for people: "--lora_alpha", a file path
    std::vector<std::string> notes;
};

// A LoRA rank of `module`: the first rank_pattern key matching its path, else the configured r.
std::optional<int64_t> module_rank(const LoraHyperparameters& h, const std::string& module);

// "16", "0.5": a number as a person writes it, for messages.
std::string number_text(double x);

// Reads the sources above in the order --lora_alpha, adapter_config.json, lora_train_meta.json;
// two files that disagree, a missing alpha, alpha <= 0 or an adapter kind this tool cannot
// merge (DoRA, ...) are errors that say how to pass the value. `adapter_summary` describes the
// tensors found, for the message.
LoraHyperparameters resolve_lora_hyperparameters(const LoraOptions& options, const std::string& adapter_summary);

// The alpha of one module: the first alpha_pattern key matching its path as PEFT matches
// them (`(.*\.)?(KEY)$`), else the global alpha.
double module_alpha(const LoraHyperparameters& h, const std::string& module);

}  // namespace vmerge
