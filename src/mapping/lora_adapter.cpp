#include "mapping/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/text_pattern.h"
#include "core/error.h"
#include "io/input_file.h"
#include "io/json_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

// A state-dict name of a PeftModel, taken apart.
struct PeftName {
    enum class Kind { Plain, Base, LoraA, LoraB, EmbeddingA, EmbeddingB, Original, Trained } kind = Kind::Plain;
    std::string module;   // the wrapped module's path (Base/Lora*/Original/Trained)
    std::string name;     // the HF name this tensor has in the model (Plain/Base/Original/Trained)
    std::string adapter;  // the adapter name between lora_A. and .weight ("default")
};

std::vector<std::string> split_dots(const std::string& name) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
        const size_t dot = name.find('.', start);
        parts.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
        if (dot == std::string::npos) return parts;
        start = dot + 1;
    }
}

std::string join_dots(const std::vector<std::string>& parts, size_t begin, size_t end) {
    std::string out;
    for (size_t i = begin; i < end; ++i) out += (i > begin ? "." : "") + parts[i];
    return out;
}

// Name parts that mark adapter kinds a plain W + s·B·A would merge wrongly.
std::string refused_kind(const std::vector<std::string>& parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        if (p == "lora_magnitude_vector") return "DoRA (lora_magnitude_vector)";
        if (p == "token_adapter" || p.starts_with("trainable_tokens_")) return "trainable tokens";
        if (p == "lora_B" && i + 2 < parts.size() && parts[i + 2] == "bias") return "lora_bias (lora_B bias)";
        for (const char* prefix : {"hada_", "lokr_", "oft_", "boft_", "ia3_", "vera_", "fourierft_", "lora_T", "lora_E"})
            if (p.starts_with(prefix)) return "a PEFT method other than LoRA ('" + p + "')";
    }
    return "";
}

PeftName parse_peft_name(const std::string& full, const std::string& where) {
    PeftName out;
    const std::string name = full.starts_with(kPeftPrefix) ? full.substr(std::string(kPeftPrefix).size()) : full;
    const auto parts = split_dots(name);
    if (const std::string kind = refused_kind(parts); !kind.empty())
        throw Error(where + ": '" + full + "' belongs to " + kind +
                    ", which is not a plain LoRA adapter: folding it in as W + (alpha/r)·B·A would give wrong weights, "
                    "and vmerge does not support it");
    out.name = name;
    for (size_t i = 0; i < parts.size(); ++i) {
        const std::string& p = parts[i];
        const std::string module = join_dots(parts, 0, i);
        if (p == "lora_A" || p == "lora_B") {
            if (i + 3 != parts.size() || parts[i + 2] != "weight")
                throw Error(where + ": '" + full + "': expected <module>." + p + ".<adapter>.weight");
            out.kind = p == "lora_A" ? PeftName::Kind::LoraA : PeftName::Kind::LoraB;
            out.module = module;
            out.adapter = parts[i + 1];
            return out;
        }
        if (p == "lora_embedding_A" || p == "lora_embedding_B") {
            if (i + 2 != parts.size()) throw Error(where + ": '" + full + "': expected <module>." + p + ".<adapter>");
            out.kind = p == "lora_embedding_A" ? PeftName::Kind::EmbeddingA : PeftName::Kind::EmbeddingB;
            out.module = module;
            out.adapter = parts[i + 1];
            return out;
        }
        if (p == "base_layer" || p == "original_module") {
            out.kind = p == "base_layer" ? PeftName::Kind::Base : PeftName::Kind::Original;
            out.module = module;
            out.name = module + "." + join_dots(parts, i + 1, parts.size());
            return out;
        }
        if (p == "modules_to_save") {
            if (i + 2 >= parts.size()) throw Error(where + ": '" + full + "': expected <module>.modules_to_save.<adapter>.<param>");
            out.kind = PeftName::Kind::Trained;
            out.module = module;
            out.adapter = parts[i + 1];
            out.name = module + "." + join_dots(parts, i + 2, parts.size());
            return out;
        }
    }
    return out;
}

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

std::string number_text(double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
    std::string s = std::to_string(x);
    while (s.size() > 1 && s.back() == '0') s.pop_back();
    return s;
}

nlohmann::json json_number(double x) {
    if (x == std::floor(x) && std::fabs(x) < 1e15) return static_cast<int64_t>(x);
    return x;
}

// PEFT's pattern rule: a key matches a module path that ends with it at a dot boundary. The key
// is text from adapter_config.json: matched by RE2, in linear time whatever it holds.
bool pattern_matches(const std::string& key, const std::string& module) {
    return TextPattern("(.*\\.)?(" + key + ")", "adapter_config.json: rank_pattern/alpha_pattern key").full_match(module);
}

std::optional<int64_t> module_rank(const LoraHyperparameters& h, const std::string& module) {
    for (auto it = h.rank_pattern.begin(); it != h.rank_pattern.end(); ++it)
        if (it.value().is_number() && pattern_matches(it.key(), module))
            return json_int_within(it.value(), 1, kMaxLoraRank, "adapter_config.json: rank_pattern '" + it.key() + "'");
    return h.r;
}

std::string leaf_of(const std::string& module) {
    const size_t dot = module.rfind('.');
    return dot == std::string::npos ? module : module.substr(dot + 1);
}

}  // namespace

std::vector<std::string> peft_target_modules(const std::vector<std::string>& adapted, const std::vector<std::string>& base) {
    std::map<std::string, std::set<std::string>> adapted_by_leaf, base_by_leaf;
    for (const auto& m : adapted) adapted_by_leaf[leaf_of(m)].insert(m);
    for (const auto& m : base) base_by_leaf[leaf_of(m)].insert(m);
    std::set<std::string> targets;
    for (const auto& [leaf, modules] : adapted_by_leaf) {
        const auto& all = base_by_leaf[leaf];
        const std::set<std::string>& have = modules;  // clang 14 cannot capture a structured binding
        const bool every = std::all_of(all.begin(), all.end(), [&](const std::string& m) { return have.count(m) > 0; });
        if (every) targets.insert(leaf);
        else targets.insert(modules.begin(), modules.end());
    }
    return {targets.begin(), targets.end()};
}

bool is_peft_name(const std::string& name) {
    for (const auto& p : split_dots(name))
        if (p == "lora_A" || p == "lora_B" || p == "lora_embedding_A" || p == "lora_embedding_B" || p == "base_layer" ||
            p == "modules_to_save" || p == "original_module" || p == "lora_magnitude_vector")
            return true;
    return false;
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

namespace {

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

LoraHyperparameters resolve_lora_hyperparameters(const LoraOptions& options, const std::string& adapter_summary) {
    const LoraMetadataFiles files = options.metadata ? *options.metadata : read_lora_metadata(options.checkpoint_dir);
    LoraHyperparameters h;
    std::vector<FoundAlpha> found;
    if (files.adapter_config.exists)
        interpret_json(files.adapter_config.path, [&] { read_found_adapter_config(h, found, files.adapter_config); });
    if (files.train_meta.exists) interpret_json(files.train_meta.path, [&] {
        const fs::path meta(files.train_meta.path);
        const nlohmann::json m = parse_json_text(files.train_meta.contents(), files.train_meta.path);
        if (auto a = number_field(m, "lora_alpha", meta)) found.push_back({*a, meta});
        if (auto r = rank_field(m, "r", meta); r && !h.r) h.r = *r;
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

namespace {

// The PEFT names of a state dict, taken apart and grouped.
struct PeftInventory {
    struct Pair {
        std::optional<size_t> a, b;
        bool embedding = false;
    };
    std::vector<PeftName> parsed;                      // one per mapping tensor
    std::map<std::string, Pair> pairs;                 // by module path
    std::vector<std::string> module_order;             // first appearance
    std::map<std::string, size_t> originals, trained;  // HF name -> tensor index
    std::set<std::string> saved_modules;
    std::map<std::string, size_t> model_index;         // the model's tensors by HF name
};

PeftInventory inventory_peft_names(const TensorMapping& mapping, const std::string& where) {
    using K = PeftName::Kind;
    PeftInventory inv;
    std::set<std::string> adapters;
    for (const auto& t : mapping.tensors) inv.parsed.push_back(parse_peft_name(t.name, where));
    for (size_t i = 0; i < inv.parsed.size(); ++i) {
        const PeftName& p = inv.parsed[i];
        if (!p.adapter.empty()) adapters.insert(p.adapter);
        if (p.kind == K::LoraA || p.kind == K::LoraB || p.kind == K::EmbeddingA || p.kind == K::EmbeddingB) {
            if (!inv.pairs.count(p.module)) inv.module_order.push_back(p.module);
            PeftInventory::Pair& pair = inv.pairs[p.module];
            const bool is_a = p.kind == K::LoraA || p.kind == K::EmbeddingA;
            (is_a ? pair.a : pair.b) = i;
            pair.embedding = p.kind == K::EmbeddingA || p.kind == K::EmbeddingB;
        } else if (p.kind == K::Original) {
            inv.originals[p.name] = i;
        } else if (p.kind == K::Trained) {
            inv.trained[p.name] = i;
            inv.saved_modules.insert(p.module);
        }
    }
    if (adapters.size() > 1) {
        std::string list;
        for (const auto& a : adapters) list += (list.empty() ? "" : ", ") + a;
        throw Error(where + ": holds several LoRA adapters (" + list + "); vmerge handles one adapter per checkpoint");
    }
    for (const auto& [name, index] : inv.trained)
        if (!inv.originals.count(name))
            throw Error(where + ": '" + mapping.tensors[index].name + "' (modules_to_save) has no original_module copy");
    for (size_t i = 0; i < inv.parsed.size(); ++i) {
        if (inv.parsed[i].kind == K::Plain || inv.parsed[i].kind == K::Base) {
            if (!inv.model_index.emplace(inv.parsed[i].name, i).second)
                throw Error(where + ": '" + inv.parsed[i].name + "' appears twice once the PEFT names are removed");
        }
    }
    return inv;
}

// Every A/B pair complete and shaped as a rank-r update of its base weight; the distinct ranks.
std::set<int64_t> check_lora_pairs(const PeftInventory& inv, const TensorMapping& mapping, const std::string& where) {
    std::set<int64_t> ranks;
    for (const auto& module : inv.module_order) {
        const PeftInventory::Pair& pair = inv.pairs.at(module);
        const char* a_name = pair.embedding ? "lora_embedding_A" : "lora_A";
        const char* b_name = pair.embedding ? "lora_embedding_B" : "lora_B";
        if (!pair.a || !pair.b)
            throw Error(where + ": module '" + module + "' has " + (pair.a ? a_name : b_name) + " but no " +
                        (pair.a ? b_name : a_name));
        const std::string weight = module + ".weight";
        if (!inv.model_index.count(weight))
            throw Error(where + ": module '" + module + "' has a LoRA adapter but no base weight '" + weight +
                        "' (expected '" + kPeftPrefix + module + ".base_layer.weight')");
        const OutputTensor& w = mapping.tensors[inv.model_index.at(weight)];
        const OutputTensor& a = mapping.tensors[*pair.a];
        const OutputTensor& b = mapping.tensors[*pair.b];
        if (w.shape.size() != 2 || a.shape.size() != 2 || b.shape.size() != 2 || a.shape[0] != b.shape[1])
            throw Error(where + ": module '" + module + "': " + a_name + " " + shape_to_string(a.shape) + " and " + b_name + " " +
                        shape_to_string(b.shape) + " do not form a rank-r update of the 2-D weight " +
                        shape_to_string(w.shape));
        // Linear: W [out, in] += B [out, r] · A [r, in]. Embedding: W [vocab, dim] += (B [dim, r] · A [r, vocab])ᵀ.
        const Shape expected = pair.embedding ? Shape{a.shape[1], b.shape[0]} : Shape{b.shape[0], a.shape[1]};
        if (w.shape != expected)
            throw Error(where + ": module '" + module + "': " + a_name + " " + shape_to_string(a.shape) + " and " + b_name +
                        " " + shape_to_string(b.shape) + " make an update of shape " + shape_to_string(expected) +
                        ", but the weight is " + shape_to_string(w.shape));
        ranks.insert(a.shape[0]);
    }
    return ranks;
}

// Merge: one LoraDelta per adapted weight, scaled by its alpha over r (or sqrt(r)).
std::vector<LoraDelta> lora_deltas(const PeftInventory& inv, const TensorMapping& mapping, const LoraHyperparameters& h,
                                   std::map<std::string, size_t>& delta_of) {
    std::vector<LoraDelta> deltas;
    for (const auto& module : inv.module_order) {
        const PeftInventory::Pair& pair = inv.pairs.at(module);
        LoraDelta d;
        d.a = mapping.tensors[*pair.a];
        d.b = mapping.tensors[*pair.b];
        d.transposed = pair.embedding;
        const double r = static_cast<double>(d.a.shape[0]);
        d.scale = module_alpha(h, module) / (h.use_rslora ? std::sqrt(r) : r);
        delta_of[module + ".weight"] = deltas.size();
        deltas.push_back(std::move(d));
    }
    return deltas;
}

// The mapping with PEFT names removed: base tensors under their HF names (each adapted weight
// pointing at its delta, Merge), then the adapter's tensors under PEFT names (Extract).
std::vector<OutputTensor> rewrite_peft_tensors(const PeftInventory& inv, const TensorMapping& mapping, LoraMode mode,
                                               const std::map<std::string, size_t>& delta_of, const std::string& where) {
    using K = PeftName::Kind;
    std::vector<OutputTensor> model, adapter;
    for (size_t i = 0; i < inv.parsed.size(); ++i) {
        const PeftName& p = inv.parsed[i];
        OutputTensor t = mapping.tensors[i];
        if (p.kind == K::Plain || p.kind == K::Base) {
            t.name = p.name;
            if (auto it = delta_of.find(p.name); it != delta_of.end()) t.lora_delta = it->second;
            model.push_back(std::move(t));
        } else if (p.kind == K::Original) {
            // Extract: the frozen copy is the base model's; Merge: the trained copy replaces it.
            if (mode == LoraMode::Merge) {
                OutputTensor replacement = mapping.tensors[inv.trained.at(p.name)];
                replacement.name = p.name;
                if (replacement.shape != t.shape)
                    throw Error(where + ": modules_to_save copy of '" + p.name + "' is " + shape_to_string(replacement.shape) +
                                ", the original " + shape_to_string(t.shape));
                model.push_back(std::move(replacement));
            } else {
                t.name = p.name;
                model.push_back(std::move(t));
            }
        } else if (mode == LoraMode::Extract) {
            static const std::map<K, const char*> suffix{{K::LoraA, ".lora_A.weight"}, {K::LoraB, ".lora_B.weight"},
                                                         {K::EmbeddingA, ".lora_embedding_A"},
                                                         {K::EmbeddingB, ".lora_embedding_B"}};
            t.name = p.kind == K::Trained ? kPeftPrefix + p.name : kPeftPrefix + p.module + suffix.at(p.kind);
            t.adapter = true;
            adapter.push_back(std::move(t));
        }
    }
    for (auto& t : adapter) model.push_back(std::move(t));
    return model;
}

// Extract: the adapter_config.json PEFT loads the written adapter with.
nlohmann::json extracted_adapter_config(const TensorMapping& mapping, const PeftInventory& inv, const LoraOptions& options,
                                        const LoraHyperparameters& h, const nlohmann::json& rank_pattern, int64_t config_r) {
    std::vector<std::string> base_modules;
    for (const auto& t : mapping.tensors)
        if (!t.adapter && t.name.ends_with(".weight")) base_modules.push_back(t.name.substr(0, t.name.size() - 7));
    const auto target_modules_list = peft_target_modules(inv.module_order, base_modules);
    const std::vector<std::string> saved(inv.saved_modules.begin(), inv.saved_modules.end());
    const nlohmann::json& f = h.found_config;
    auto found_or = [&](const char* key, nlohmann::json fallback) {
        return f.is_object() && f.contains(key) ? f[key] : fallback;
    };
    return {
        {"alpha_pattern", h.alpha_pattern},
        {"auto_mapping", nullptr},
        {"base_model_name_or_path", found_or("base_model_name_or_path", options.base_model_name_or_path)},
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
        {"lora_alpha", json_number(h.alpha)},
        {"lora_bias", false},
        {"lora_dropout", found_or("lora_dropout", 0.0)},
        {"megatron_config", nullptr},
        {"megatron_core", "megatron.core"},
        {"modules_to_save", saved.empty() ? nlohmann::json(nullptr) : nlohmann::json(saved)},
        {"peft_type", "LORA"},
        {"qalora_group_size", 16},
        {"r", config_r},
        {"rank_pattern", rank_pattern},
        {"revision", nullptr},
        {"target_modules", target_modules_list},
        {"target_parameters", nullptr},
        {"task_type", found_or("task_type", options.task_type)},
        {"trainable_token_indices", nullptr},
        {"use_dora", false},
        {"use_qalora", false},
        {"use_rslora", h.use_rslora},
    };
}

// What the user reads about the written adapter (Extract) or the folded one (Merge).
void add_lora_notes(LoraResult& result, const PeftInventory& inv, const LoraOptions& options, const LoraHyperparameters& h,
                    const nlohmann::json& rank_pattern) {
    const size_t modules = inv.module_order.size();
    if (options.mode == LoraMode::Extract) {
        const size_t saved = inv.saved_modules.size();
        result.notes.push_back("LoRA adapter (" + std::to_string(modules) + " module" + (modules == 1 ? "" : "s") +
                               ", lora_alpha " + number_text(h.alpha) + " from " + h.source + ") written to " +
                               kAdapterFolder +
                               "/ in PEFT format; the model folder holds the base weights (--merge_lora folds the adapter in)");
        if (!rank_pattern.empty() || !h.alpha_pattern.empty())
            result.notes.push_back(std::string("the adapter has ") +
                                   (!rank_pattern.empty() ? "rank_pattern" : "alpha_pattern") +
                                   ": PEFT scales each module by its own alpha/r, vLLM applies one lora_alpha/r to every "
                                   "module (it ignores rank_pattern and alpha_pattern), so vLLM would serve other weights; "
                                   "use --merge_lora for vLLM");
        if (saved)
            result.notes.push_back("the adapter has modules_to_save (" + std::to_string(saved) + " module" +
                                   (saved > 1 ? "s" : "") + "): PEFT loads it, vLLM does not (use --merge_lora for vLLM)");
        return;
    }
    const size_t trained = inv.trained.size();
    result.notes.push_back("LoRA adapter folded into " + std::to_string(modules) + " weight" + (modules == 1 ? "" : "s") +
                           ": W + " + std::string(h.use_rslora ? "alpha/sqrt(r)" : "alpha/r") + " · B·A in fp32 (lora_alpha " +
                           number_text(h.alpha) + " from " + h.source + ")" +
                           (trained == 0 ? "" : "; " + std::to_string(trained) + " modules_to_save tensor" +
                                                    (trained > 1 ? "s replace their originals" : " replaces its original")));
}

}  // namespace

LoraResult apply_lora(TensorMapping& mapping, const LoraOptions& options, const std::string& where) {
    LoraResult result;
    if (std::none_of(mapping.tensors.begin(), mapping.tensors.end(),
                     [](const OutputTensor& t) { return is_peft_name(t.name); }))
        return result;
    result.found = true;
    const PeftInventory inv = inventory_peft_names(mapping, where);
    const std::set<int64_t> ranks = check_lora_pairs(inv, mapping, where);
    const int64_t largest_r = ranks.empty() ? 0 : *ranks.rbegin();
    result.modules = inv.module_order.size();
    result.ranks.assign(ranks.begin(), ranks.end());
    if (inv.module_order.empty() && inv.trained.empty())
        throw Error(where + ": holds PEFT-wrapped names (base_layer) but no lora_A/lora_B tensors");

    std::string summary = where + ": LoRA adapter on " + std::to_string(inv.module_order.size()) + " module" +
                          (inv.module_order.size() == 1 ? "" : "s") + " (r = ";
    for (auto r : ranks) summary += (r == *ranks.begin() ? "" : "/") + std::to_string(r);
    summary += ")";
    const LoraHyperparameters h = resolve_lora_hyperparameters(options, summary);
    result.alpha = h.alpha;
    result.alpha_source = h.source;
    result.notes = h.notes;

    // The configured r must match the tensors, or PEFT builds modules of the wrong shape:
    // record every module whose r differs in rank_pattern.
    nlohmann::json rank_pattern = h.rank_pattern;
    const int64_t config_r = h.r.value_or(largest_r);
    for (const auto& module : inv.module_order) {
        const int64_t r = mapping.tensors[*inv.pairs.at(module).a].shape[0];
        if (module_rank(h, module).value_or(config_r) != r) rank_pattern[module] = r;
    }

    std::map<std::string, size_t> delta_of;  // weight name -> delta index (Merge)
    std::vector<LoraDelta> deltas;
    if (options.mode == LoraMode::Merge) deltas = lora_deltas(inv, mapping, h, delta_of);
    mapping.tensors = rewrite_peft_tensors(inv, mapping, options.mode, delta_of, where);
    mapping.lora_deltas = std::move(deltas);
    if (options.mode == LoraMode::Extract)
        result.adapter_config = extracted_adapter_config(mapping, inv, options, h, rank_pattern, config_r);
    add_lora_notes(result, inv, options, h, rank_pattern);
    return result;
}

}  // namespace vmerge
