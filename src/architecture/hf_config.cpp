#include "architecture/hf_config.h"

#include <filesystem>
#include <map>
#include <stdexcept>

#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_file.h"
#include "io/input_tree.h"
#include "io/json_file.h"

namespace vmerge {

HfConfig load_hf_config(const std::string& dir) { return parse_hf_config(dir, read_hf_config_text(dir)); }

std::string read_hf_config_text(const std::string& dir) {
    const std::string path = join_path(dir, "config.json");
    if (!path_exists(path)) throw Error(path + ": cannot open the model config (pass --hf_config DIR)");
    // Every other file of the folder is copied into the output at the end: refuse a FIFO or
    // device among them now, before anything is written.
    require_no_special_files(dir);
    return read_small_file(path, kMaxJsonBytes, "a model config");
}

HfConfig parse_hf_config(const std::string& dir, const std::string& text) {
    const std::string path = dir + "/config.json";
    HfConfig config;
    config.dir = dir;
    config.text = text;
    config.json = parse_json_text(text, path);
    if (!config.json.is_object()) throw Error(path + ": expected a JSON object");
    for (const char* key : {"dtype", "torch_dtype"}) {
        auto it = config.json.find(key);
        if (it != config.json.end() && it->is_string()) {
            config.dtype = dtype_from_torch_name(it->get<std::string>());
            if (!config.dtype)
                throw Error(path + ": unknown " + key + " '" + it->get<std::string>() + "'");
            break;
        }
    }
    auto tied = config.json.find("tie_word_embeddings");
    config.tie_word_embeddings = tied != config.json.end() && tied->is_boolean() && tied->get<bool>();
    auto arch = config.json.find("architectures");
    if (arch != config.json.end() && arch->is_array())
        for (const auto& a : *arch)
            if (a.is_string()) config.architectures.push_back(a.get<std::string>());
    return config;
}

std::optional<std::pair<int64_t, int64_t>> known_config_int_bounds(const std::string& key) {
    // Sizes go into tensor shapes (products of two stay far below 2^63) and counts into loops
    // and tables; each bound is well above the largest released model's value.
    constexpr int64_t kDim = int64_t{1} << 20, kFfn = int64_t{1} << 24, kHeads = int64_t{1} << 16;
    static const std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> bounds{
        {"hidden_size", {1, kDim}},
        {"num_attention_heads", {1, kHeads}},
        {"num_key_value_heads", {1, kHeads}},
        {"head_dim", {1, kHeads}},
        {"vocab_size", {1, kMaxVocab}},
        {"num_hidden_layers", {1, kMaxLayers}},
        {"num_labels", {1, kDim}},
        {"intermediate_size", {1, kFfn}},
        {"moe_intermediate_size", {1, kFfn}},
        {"shared_expert_intermediate_size", {1, kFfn}},
        {"num_local_experts", {1, kMaxExperts}},
        {"num_experts", {0, kMaxExperts}},
        {"n_routed_experts", {1, kMaxExperts}},
        {"n_shared_experts", {0, 1024}},
        {"decoder_sparse_step", {1, kMaxLayers}},
        {"first_k_dense_replace", {0, kMaxLayers}},
        {"num_nextn_predict_layers", {0, 64}},
        {"moe_layer_freq", {1, kMaxLayers}},
        {"qk_nope_head_dim", {0, kHeads}},
        {"qk_rope_head_dim", {0, kHeads}},
        {"v_head_dim", {1, kHeads}},
        {"kv_lora_rank", {1, kDim}},
        {"q_lora_rank", {1, kDim}},
    };
    auto it = bounds.find(key);
    if (it == bounds.end()) return std::nullopt;
    return it->second;
}

std::pair<int64_t, int64_t> config_int_bounds(const std::string& key) {
    const auto bounds = known_config_int_bounds(key);
    if (!bounds) throw std::logic_error("config_int_bounds: no bounds for config.json key " + key);
    return *bounds;
}

int64_t config_int(const HfConfig& config, const std::string& key, std::optional<int64_t> fallback) {
    const auto [lo, hi] = config_int_bounds(key);
    const std::string path = config.dir + "/config.json";
    auto it = config.json.find(key);
    if (it == config.json.end() || it->is_null()) {
        if (fallback) return *fallback;
        throw Error(path + ": missing '" + key + "'");
    }
    return json_int_within(*it, lo, hi, path + ": " + key);
}

int64_t text_config_int(const HfConfig& config, const std::string& key, std::optional<int64_t> fallback) {
    auto text = config.json.find("text_config");
    if (text == config.json.end() || !text->is_object()) return config_int(config, key, fallback);
    auto it = text->find(key);
    if (it == text->end() || it->is_null()) return config_int(config, key, fallback);
    const auto [lo, hi] = config_int_bounds(key);
    return json_int_within(*it, lo, hi, config.dir + "/config.json: text_config." + key);
}

}  // namespace vmerge
