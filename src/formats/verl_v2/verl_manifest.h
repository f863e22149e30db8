#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace vmerge {

// One `contents` entry of verl's ckpt_contents.json: where a piece of the save is (relative to
// the role folder) and in which format ("huggingface", "megatron_dist_checkpoint", "json").
struct VerlManifestEntry {
    std::string path;
    std::string format;
    std::string peft_adapter_path;  // the model slot with PEFT: the HF adapter export
};

// What vmerge reads of the manifest verl's Megatron checkpoint manager writes last
// (docs/reference/verl-formats.md §1.2): the schema, the model slot, and where config and
// tokenizer are.
struct VerlManifest {
    int schema_version = 0;
    std::string role;
    bool use_dist_checkpointing = false;
    bool peft = false;
    std::optional<VerlManifestEntry> model, hf_config, tokenizer, peft_adapters;
};

inline constexpr const char* kVerlManifestName = "ckpt_contents.json";
inline constexpr const char* kVerlDistFormat = "megatron_dist_checkpoint";
inline constexpr const char* kVerlHfFormat = "huggingface";

// Parses the manifest `j` read from `where`. A missing or mistyped field, a path that leaves
// the role folder (absolute, "..") or a model slot in a format vmerge cannot read is an Error
// naming the file and the key.
VerlManifest parse_verl_manifest(const nlohmann::json& j, const std::string& where);

}  // namespace vmerge
