#include "mapping/lora_hyperparameters.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/text_pattern.h"
#include "io/input_file.h"
#include "io/json_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

std::optional<double> number_field(const nlohmann::json& j, const char* key, const fs::path& path) {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) throw Error(path.string() + ": '" + key + "' is not a number");
    return j[key].get<double>();
}

// A LoRA rank: a whole number within bounds (it sizes the adapter tensors vmerge expects).
constexpr int64_t kMaxLoraRank = int64_t{1} << 20;
std::optional<int64_t> rank_field(const nlohmann::json& j, const char* key, const fs::path& path) {
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
    return json_int_within(j[key], 1, kMaxLoraRank, path.string() + ": " + key);
}

// PEFT's pattern rule: a key matches a module path that ends with it at a dot boundary. The key
// is text from adapter_config.json: matched by RE2, in linear time whatever it holds.
bool pattern_matches(const std::string& key, const std::string& module) {
    return TextPattern("(.*\\.)?(" + key + ")", "adapter_config.json: rank_pattern/alpha_pattern key").full_match(module);
}

struct FoundAlpha {
    double alpha;
    fs::path path;
};

// adapter_config.json found beside the checkpoint: refuses adapter kinds vmerge cannot merge,
// takes alpha, r, rsLoRA and the patterns.
void read_found_adapter_config(LoraHyperparameters& h, std::vector<FoundAlpha>& found, const SmallFile& file) {
    const fs::path config_path(file.path);
    h.found_config = parse_json_text(file.contents(), file.path);
    const auto& c = h.found_config;
    if (c.value("peft_type", std::string("LORA")) != "LORA")
        throw Error(config_path.string() + ": peft_type '" + c.value("peft_type", std::string()) + "', expected LORA");
    for (const char* flag : {"use_dora", "use_qalora", "lora_bias"})
        if (c.contains(flag) && c[flag].is_boolean() && c[flag].get<bool>())
            throw Error(config_path.string() + ": '" + flag + "' is true: that adapter is not a plain LoRA (W + s·B·A) and "
                        "vmerge does not support it");
    for (const char* field : {"layer_replication", "target_parameters", "trainable_token_indices"})
        if (c.contains(field) && !c[field].is_null())
            throw Error(config_path.string() + ": '" + field + "' is set: vmerge does not support that adapter kind");
    if (c.value("fan_in_fan_out", false))
        throw Error(config_path.string() + ": fan_in_fan_out is true (Conv1D weights stored [in, out]); not supported");
    if (auto a = number_field(c, "lora_alpha", config_path)) found.push_back({*a, config_path});
    if (auto r = rank_field(c, "r", config_path)) h.r = *r;
    if (c.contains("use_rslora") && c["use_rslora"].is_boolean()) h.use_rslora = c["use_rslora"].get<bool>();
    if (c.contains("rank_pattern") && c["rank_pattern"].is_object()) h.rank_pattern = c["rank_pattern"];
    if (c.contains("alpha_pattern") && c["alpha_pattern"].is_object()) h.alpha_pattern = c["alpha_pattern"];
}

// Which alpha wins: --lora_alpha, else the files' (which must agree); none is an error.
void choose_alpha(LoraHyperparameters& h, const std::vector<FoundAlpha>& found, const LoraOptions& options,
                  const std::string& adapter_summary) {
    const fs::path dir(options.checkpoint_dir);
    for (size_t i = 1; i < found.size(); ++i)
        if (found[i].alpha != found[0].alpha && !options.alpha)
            throw Error("lora_alpha disagrees: " + number_text(found[0].alpha) + " in " + found[0].path.string() + ", " +
                        number_text(found[i].alpha) + " in " + found[i].path.string() +
                        "; pass the value the adapter was trained with as --lora_alpha");
    if (options.alpha) {
        h.alpha = *options.alpha;
        h.source = "--lora_alpha";
        if (!found.empty() && found[0].alpha != *options.alpha)
            h.notes.push_back("--lora_alpha " + number_text(*options.alpha) + " overrides lora_alpha " +
                              number_text(found[0].alpha) + " of " + found[0].path.string());
    } else if (!found.empty()) {
        h.alpha = found[0].alpha;
        h.source = found[0].path.string();
    } else if (!options.alpha_unrecorded.empty()) {
        throw Error(adapter_summary + ": " + options.alpha_unrecorded + "; pass --lora_alpha with the value the adapter "
                    "was trained with (verl: actor_rollout_ref.model.lora.alpha, default 32)");
    } else {
        const fs::path config_path = dir / "lora_adapter" / "adapter_config.json";
        throw Error(adapter_summary + ", but lora_alpha is recorded nowhere (looked for " + config_path.string() + " and " +
                    (dir / "lora_train_meta.json").string() + " and its parent folder's); pass --lora_alpha with the value "
                    "the adapter was trained with (verl: actor_rollout_ref.model.lora_alpha, default 16; Megatron: "
                    "actor_rollout_ref.model.lora.alpha, default 32)");
    }
    if (!(h.alpha > 0) || !std::isfinite(h.alpha))
        throw Error("lora_alpha " + number_text(h.alpha) + " (" + h.source + "): the adapter would change nothing (scale " +
                    "alpha/r = 0); pass the value the adapter was trained with as --lora_alpha");
}

}  // namespace

std::string number_text(double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    return s;
}

std::optional<int64_t> module_rank(const LoraHyperparameters& h, const std::string& module) {
    for (auto it = h.rank_pattern.begin(); it != h.rank_pattern.end(); ++it)
        if (it.value().is_number() && pattern_matches(it.key(), module))
            return json_int_within(it.value(), 1, kMaxLoraRank, "adapter_config.json: rank_pattern '" + it.key() + "'");
    return h.r;
}

LoraMetadataFiles read_lora_metadata(const std::string& checkpoint_dir, const std::string& adapter_config) {
    const fs::path dir(checkpoint_dir);
    LoraMetadataFiles files;
    const std::string config_path =
        adapter_config.empty() ? (dir / "lora_adapter" / "adapter_config.json").string() : adapter_config;
    files.adapter_config = read_small_file_if_present(config_path, kMaxJsonBytes, "a JSON file");
    for (const fs::path& meta : {dir / "lora_train_meta.json", dir.parent_path() / "lora_train_meta.json"}) {
        files.train_meta = read_small_file_if_present(meta.string(), kMaxJsonBytes, "a JSON file");
        if (files.train_meta.exists) break;
    }
    return files;
}

std::string serialize_lora_metadata(const LoraMetadataFiles& files) {
    return serialize_small_files({files.adapter_config, files.train_meta});
}

LoraMetadataFiles deserialize_lora_metadata(const std::string& text) {
    auto files = deserialize_small_files(text);
    if (files.size() != 2) throw Error("LoRA metadata: malformed message");
    return {std::move(files[0]), std::move(files[1])};
}

LoraHyperparameters resolve_lora_hyperparameters(const LoraOptions& options, const std::string& adapter_summary) {
    const LoraMetadataFiles files =
        options.metadata ? *options.metadata : read_lora_metadata(options.checkpoint_dir, options.adapter_config);
    LoraHyperparameters h;
    std::vector<FoundAlpha> found;
    if (files.adapter_config.exists)
        interpret_json(files.adapter_config.path, [&] { read_found_adapter_config(h, found, files.adapter_config); });
    if (files.train_meta.exists) interpret_json(files.train_meta.path, [&] {
        const fs::path meta(files.train_meta.path);
        const nlohmann::json m = parse_json_text(files.train_meta.contents(), files.train_meta.path);
        if (auto a = number_field(m, "lora_alpha", meta)) found.push_back({*a, meta});
        if (auto r = rank_field(m, "r", meta); r && !h.r) h.r = *r;
        if (m.contains("task_type") && m["task_type"].is_string()) h.train_meta_task_type = m["task_type"].get<std::string>();
    });
    choose_alpha(h, found, options, adapter_summary);
    if (options.use_rslora) h.use_rslora = *options.use_rslora;
    return h;
}

double module_alpha(const LoraHyperparameters& h, const std::string& module) {
    for (auto it = h.alpha_pattern.begin(); it != h.alpha_pattern.end(); ++it)
        if (it.value().is_number() && pattern_matches(it.key(), module)) return it.value().get<double>();
    return h.alpha;
}

}  // namespace vmerge
