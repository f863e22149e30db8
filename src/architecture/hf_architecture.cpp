#include "architecture/hf_architecture.h"

#include <algorithm>

#include "core/text_pattern.h"
#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {
namespace {

// A config.json integer within its bounds (config_int); fallback -1: the key is required.
int64_t get_int(const HfConfig& c, const char* key, int64_t fallback = -1) {
    return config_int(c, key, fallback >= 0 ? std::optional<int64_t>(fallback) : std::nullopt);
}

// The routed experts of a Qwen MoE config: `num_experts` as the hub's configs write it;
// transformers 5 keeps it as `num_local_experts` (an attribute map) and save_pretrained writes
// that name instead. Both given and different is an error.
int64_t qwen_expert_count(const HfConfig& c, int64_t fallback = -1) {
    const bool local = c.json.contains("num_local_experts"), named = c.json.contains("num_experts");
    if (local && named && get_int(c, "num_experts") != get_int(c, "num_local_experts"))
        throw Error(c.dir + "/config.json: num_experts " + c.json["num_experts"].dump() + " and num_local_experts " +
                    c.json["num_local_experts"].dump() + " disagree");
    return get_int(c, named || !local ? "num_experts" : "num_local_experts", fallback);
}

// The expert tensor table grows with layers x experts: bound the product, not just each.
void check_expert_table_size(const HfConfig& c, const ArchitectureInfo& arch) {
    const char* key = arch.family == "mixtral"       ? "num_local_experts"
                      : arch.family == "deepseek_v3" ? "n_routed_experts"
                      : arch.family == "dense"       ? nullptr
                                                     : "num_experts";
    if (!key) return;
    const int64_t experts = std::string(key) == "num_experts" ? qwen_expert_count(c, 0) : get_int(c, key, 0);
    if (arch.layers * experts > kMaxLayerExperts)
        throw Error(c.dir + "/config.json: num_hidden_layers " + std::to_string(arch.layers) + " x " + key + " " +
                    std::to_string(experts) + " = " + std::to_string(arch.layers * experts) +
                    " expert blocks: expected at most " + std::to_string(kMaxLayerExperts));
}

bool get_bool(const HfConfig& c, const char* key, bool fallback) {
    auto it = c.json.find(key);
    return it != c.json.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

bool has(const HfConfig& c, const char* key) {
    auto it = c.json.find(key);
    return it != c.json.end() && !it->is_null();
}

std::string layer_name(int64_t i, const std::string& rest) { return "model.layers." + std::to_string(i) + "." + rest; }

// An MTP depth's own tensors (Megatron-Bridge names); its decoder layer follows as any other.
// The release's copies of the embedding and output head are optional: Megatron-Bridge writes
// none, and vmerge adds them after this check (mtp_shared_copies.h) unless told not to.
void add_mtp_block_tensors(ExpectedTensors& out, const ArchitectureInfo& arch, int64_t i) {
    const int64_t H = arch.hidden, V = arch.vocab;
    out.required[layer_name(i, "enorm.weight")] = {H};
    out.required[layer_name(i, "hnorm.weight")] = {H};
    out.required[layer_name(i, "eh_proj.weight")] = {H, 2 * H};
    out.required[layer_name(i, "shared_head.norm.weight")] = {H};
    if (!arch.mtp_shared_copies) return;
    out.optional[layer_name(i, "embed_tokens.weight")] = {V, H};
    if (!arch.value_model) out.optional[layer_name(i, "shared_head.head.weight")] = {V, H};
}

}  // namespace

std::optional<std::string> canonical_mtp_key(const std::string& key, int64_t layers, int64_t& depth) {
    static const TextPattern inner(R"(mtp\.layers\.(\d{1,6})\.(?:transformer_layer|mtp_model_layer)\.(.*))");
    static const TextPattern own(R"(mtp\.layers\.(\d{1,6})\.(enorm|hnorm|eh_proj|final_layernorm)\.(.*))");
    TextMatch m;
    const bool is_inner = inner.full_match(key, m);
    if (!is_inner && !own.full_match(key, m)) return std::nullopt;
    depth = std::stoll(m[1]);
    const std::string layer = "decoder.layers." + std::to_string(layers + depth) + ".";
    return is_inner ? layer + std::string(m[2]) : layer + "mtp." + std::string(m[2]) + "." + std::string(m[3]);
}

namespace {

// The source 'megatron' table for `architecture` (nullptr when none).
const ArchitectureTable* megatron_table(const std::vector<ArchitectureTable>& tables, const std::string& architecture) {
    return find_architecture_table(tables, "megatron", architecture);
}

// The tensor set `table` implies: its own config_tensors, or those of the table of the
// architecture its config_check names; nullopt when it gives neither.
std::optional<ConfigTensors> config_tensors_of(const ArchitectureTable& table, const std::vector<ArchitectureTable>& tables) {
    if (table.config_tensors) return table.config_tensors;
    if (table.config_check.empty()) return std::nullopt;
    const ArchitectureTable* known = megatron_table(tables, table.config_check);
    if (!known || !known->config_tensors)
        throw Error(table.file + ": config_check '" + table.config_check +
                    "' is not an architecture with a tensor set (config_tensors) in the megatron tables (" +
                    table_architectures(tables, "megatron") + ")");
    return known->config_tensors;
}

}  // namespace

bool has_tensor_table(const HfConfig& config, const ArchitectureTables& tables) {
    if (config.architectures.empty()) return false;
    const ArchitectureTable* table = megatron_table(tables, config.architectures[0]);
    return table && config_tensors_of(*table, tables).has_value();
}

ArchitectureInfo architecture_for(const HfConfig& config, bool value_model, bool drop_mtp,
                                  const ArchitectureTables& tables) {
    if (config.architectures.empty())
        throw Error(config.dir + "/config.json: no 'architectures'; cannot choose a name table");
    ArchitectureInfo arch;
    arch.name = config.architectures[0];
    const ArchitectureTable* table = megatron_table(tables, arch.name);
    if (!table) {
        throw Error(config.dir + "/config.json: unknown architecture " + arch.name +
                    "; supported: " + table_architectures(tables, "megatron") + " (the megatron tables: " +
                    table_folders_text() + "); pass --architecture_table FILE for another");
    }
    arch.table_file = table->file;
    arch.table_name = table->name;
    if (const auto tensors = config_tensors_of(*table, tables)) {
        arch.family = tensors->family;
        arch.qkv_bias = tensors->qkv_bias;
        arch.qk_norm = tensors->qk_norm;
    }
    arch.value_model = value_model || arch.name.ends_with("ForTokenClassification");
    arch.hidden = get_int(config, "hidden_size");
    arch.heads = get_int(config, "num_attention_heads");
    arch.kv_heads = get_int(config, "num_key_value_heads", arch.heads);
    arch.head_dim = get_int(config, "head_dim", arch.heads ? arch.hidden / arch.heads : 0);
    arch.vocab = get_int(config, "vocab_size");
    arch.layers = get_int(config, "num_hidden_layers");
    arch.drop_mtp = drop_mtp;
    arch.mtp_layers = drop_mtp ? 0 : get_int(config, "num_nextn_predict_layers", 0);
    if (const ArchitectureTable* hf = find_architecture_table(tables, "hf", arch.name)) arch.mtp_shared_copies = hf->mtp_shared_copies;
    // A value model's head rules come first: they take output_layer from the causal LM's.
    if (arch.value_model)
        for (const TableRule& r : table->rules)
            if (r.value_head) arch.rules.push_back(r);
    for (const TableRule& r : table->rules)
        if (!r.value_head) arch.rules.push_back(r);
    if (!arch.family.empty()) arch.expected = expected_hf_tensors(config, arch);
    return arch;
}

nlohmann::ordered_json megatron_rules_json(const ArchitectureInfo& arch, const std::map<size_t, size_t>& used) {
    nlohmann::ordered_json rules = nlohmann::ordered_json::array();
    std::vector<const TableRule*> ordered;
    for (const TableRule& rule : arch.rules) ordered.push_back(&rule);
    std::sort(ordered.begin(), ordered.end(), [](const TableRule* a, const TableRule* b) { return a->index < b->index; });
    for (const TableRule* rule : ordered) {
        auto it = used.find(rule->index);
        if (it == used.end()) continue;
        nlohmann::ordered_json j{{"rule", rule->index}, {"from", rule->from}};
        if (rule->drop.empty()) j["to"] = split_names(rule->to);
        else j["drop"] = rule->drop;
        if (rule->split != NameSplit::None) j["split"] = name_split_name(rule->split);
        j["tp"] = tp_rule_name(rule->tp);
        if (rule->tied_head) j["tied_head"] = true;
        j["tensors"] = it->second;
        rules.push_back(std::move(j));
    }
    return {{"name", arch.table_name}, {"file", arch.table_file}, {"source", "megatron"}, {"rules_applied", rules}};
}

std::string substitute_rule(std::string_view pattern, const std::string& layer, const std::string& expert) {
    std::string out(pattern);
    for (auto [placeholder, value] : {std::pair{std::string("{i}"), layer}, std::pair{std::string("{e}"), expert}})
        for (size_t at; (at = out.find(placeholder)) != std::string::npos;) out.replace(at, placeholder.size(), value);
    return out;
}

std::vector<std::string> split_names(std::string_view names) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
        const size_t bar = names.find('|', start);
        parts.emplace_back(names.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start));
        if (bar == std::string_view::npos) return parts;
        start = bar + 1;
    }
}

std::optional<RuleMatch> match_rule(const ArchitectureInfo& arch, const std::string& key) {
    static const TextPattern layer(R"((decoder\.layers\.)(\d+)(\..*))");
    static const TextPattern expert(R"((.*\.experts\.)(\d+)(\..*))");
    std::string pattern = key, layer_index, expert_index;
    TextMatch m;
    if (layer.full_match(pattern, m)) {
        layer_index = m[2];
        pattern = std::string(m[1]) + "{i}" + std::string(m[3]);
    }
    if (expert.full_match(pattern, m)) {
        expert_index = m[2];
        pattern = std::string(m[1]) + "{e}" + std::string(m[3]);
    }
    for (const TableRule& rule : arch.rules) {
        if (rule.from != pattern) continue;
        RuleMatch match;
        match.rule = &rule;
        match.hf_names = split_names(substitute_rule(rule.to, layer_index, expert_index));
        return match;
    }
    return std::nullopt;
}

ExpectedTensors expected_hf_tensors(const HfConfig& c, const ArchitectureInfo& arch) {
    ExpectedTensors out;
    auto& req = out.required;
    const int64_t H = arch.hidden, V = arch.vocab, nq = arch.heads, ng = arch.kv_heads, d = arch.head_dim;
    req["model.embed_tokens.weight"] = {V, H};
    req["model.norm.weight"] = {H};
    if (arch.value_model) {
        const int64_t labels = get_int(c, "num_labels", 1);
        req["score.weight"] = {labels, H};
        out.optional["score.bias"] = {labels};
    } else if (!c.tie_word_embeddings) {
        req["lm_head.weight"] = {V, H};
    }
    const bool deepseek = arch.family == "deepseek_v3";
    const bool qkv_bias = arch.qkv_bias || get_bool(c, "attention_bias", false);
    const bool qk_norm = arch.qk_norm;
    check_expert_table_size(c, arch);
    const int64_t F = get_int(c, "intermediate_size");
    auto dense_mlp = [&](int64_t i, int64_t ffn, const std::string& prefix) {
        req[layer_name(i, prefix + "gate_proj.weight")] = {ffn, H};
        req[layer_name(i, prefix + "up_proj.weight")] = {ffn, H};
        req[layer_name(i, prefix + "down_proj.weight")] = {H, ffn};
    };
    for (int64_t i = 0; i < arch.layers + arch.mtp_layers; ++i) {
        if (i >= arch.layers) add_mtp_block_tensors(out, arch, i);
        req[layer_name(i, "input_layernorm.weight")] = {H};
        req[layer_name(i, "post_attention_layernorm.weight")] = {H};
        if (deepseek) {
            const int64_t nope = get_int(c, "qk_nope_head_dim"), rope = get_int(c, "qk_rope_head_dim");
            const int64_t vdim = get_int(c, "v_head_dim"), kv_lora = get_int(c, "kv_lora_rank");
            if (has(c, "q_lora_rank")) {
                const int64_t q_lora = get_int(c, "q_lora_rank");
                req[layer_name(i, "self_attn.q_a_proj.weight")] = {q_lora, H};
                req[layer_name(i, "self_attn.q_a_layernorm.weight")] = {q_lora};
                req[layer_name(i, "self_attn.q_b_proj.weight")] = {nq * (nope + rope), q_lora};
            } else {
                req[layer_name(i, "self_attn.q_proj.weight")] = {nq * (nope + rope), H};
            }
            req[layer_name(i, "self_attn.kv_a_proj_with_mqa.weight")] = {kv_lora + rope, H};
            req[layer_name(i, "self_attn.kv_a_layernorm.weight")] = {kv_lora};
            req[layer_name(i, "self_attn.kv_b_proj.weight")] = {nq * (nope + vdim), kv_lora};
            req[layer_name(i, "self_attn.o_proj.weight")] = {H, nq * vdim};
        } else {
            req[layer_name(i, "self_attn.q_proj.weight")] = {nq * d, H};
            req[layer_name(i, "self_attn.k_proj.weight")] = {ng * d, H};
            req[layer_name(i, "self_attn.v_proj.weight")] = {ng * d, H};
            req[layer_name(i, "self_attn.o_proj.weight")] = {H, nq * d};
            if (qkv_bias) {
                req[layer_name(i, "self_attn.q_proj.bias")] = {nq * d};
                req[layer_name(i, "self_attn.k_proj.bias")] = {ng * d};
                req[layer_name(i, "self_attn.v_proj.bias")] = {ng * d};
            }
            if (qk_norm) {
                req[layer_name(i, "self_attn.q_norm.weight")] = {d};
                req[layer_name(i, "self_attn.k_norm.weight")] = {d};
            }
        }
        if (arch.family == "dense") {
            dense_mlp(i, F, "mlp.");
        } else if (arch.family == "mixtral") {
            const int64_t E = get_int(c, "num_local_experts");
            req[layer_name(i, "block_sparse_moe.gate.weight")] = {E, H};
            for (int64_t e = 0; e < E; ++e) {
                const std::string p = "block_sparse_moe.experts." + std::to_string(e) + ".";
                req[layer_name(i, p + "w1.weight")] = {F, H};
                req[layer_name(i, p + "w3.weight")] = {F, H};
                req[layer_name(i, p + "w2.weight")] = {H, F};
            }
        } else {
            bool moe;
            int64_t E, Fm = get_int(c, "moe_intermediate_size");
            if (deepseek) {
                E = get_int(c, "n_routed_experts");
                moe = i >= get_int(c, "first_k_dense_replace", 0) && i % get_int(c, "moe_layer_freq", 1) == 0;
            } else {
                E = qwen_expert_count(c);
                const int64_t step = get_int(c, "decoder_sparse_step", 1);
                bool mlp_only = false;
                if (auto it = c.json.find("mlp_only_layers"); it != c.json.end() && it->is_array())
                    for (const auto& l : *it) mlp_only = mlp_only || (l.is_number_integer() && l.get<int64_t>() == i);
                moe = !mlp_only && E > 0 && (i + 1) % step == 0;
            }
            if (!moe) {
                dense_mlp(i, F, "mlp.");
                continue;
            }
            req[layer_name(i, "mlp.gate.weight")] = {E, H};
            for (int64_t e = 0; e < E; ++e) dense_mlp(i, Fm, "mlp.experts." + std::to_string(e) + ".");
            if (arch.family == "qwen2_moe") {
                dense_mlp(i, get_int(c, "shared_expert_intermediate_size"), "mlp.shared_expert.");
                req[layer_name(i, "mlp.shared_expert_gate.weight")] = {1, H};
            } else if (deepseek) {
                req[layer_name(i, "mlp.gate.e_score_correction_bias")] = {E};
                const int64_t shared = get_int(c, "n_shared_experts", 0);
                if (shared > 0) dense_mlp(i, Fm * shared, "mlp.shared_experts.");
            }
        }
    }
    return out;
}

}  // namespace vmerge
