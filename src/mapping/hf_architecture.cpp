#include "mapping/hf_architecture.h"

#include <array>
#include <regex>

#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {
namespace {

using S = NameSplit;

// megatron-formats.md §5.1: every decoder-only model here shares these.
constexpr std::array kDenseRules{
    NameRule{"embedding.word_embeddings.weight", "model.embed_tokens.weight", S::Vocab},
    NameRule{"decoder.final_layernorm.weight", "model.norm.weight"},
    NameRule{"output_layer.weight", "lm_head.weight", S::Vocab},
    NameRule{"decoder.layers.{i}.self_attention.linear_qkv.layer_norm_weight", "model.layers.{i}.input_layernorm.weight"},
    NameRule{"decoder.layers.{i}.input_layernorm.weight", "model.layers.{i}.input_layernorm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_qkv.weight",
             "model.layers.{i}.self_attn.q_proj.weight|model.layers.{i}.self_attn.k_proj.weight|"
             "model.layers.{i}.self_attn.v_proj.weight", S::Qkv},
    NameRule{"decoder.layers.{i}.self_attention.linear_qkv.bias",
             "model.layers.{i}.self_attn.q_proj.bias|model.layers.{i}.self_attn.k_proj.bias|"
             "model.layers.{i}.self_attn.v_proj.bias", S::Qkv},
    NameRule{"decoder.layers.{i}.self_attention.q_layernorm.weight", "model.layers.{i}.self_attn.q_norm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.k_layernorm.weight", "model.layers.{i}.self_attn.k_norm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_proj.weight", "model.layers.{i}.self_attn.o_proj.weight"},
    NameRule{"decoder.layers.{i}.mlp.linear_fc1.layer_norm_weight", "model.layers.{i}.post_attention_layernorm.weight"},
    NameRule{"decoder.layers.{i}.pre_mlp_layernorm.weight", "model.layers.{i}.post_attention_layernorm.weight"},
    NameRule{"decoder.layers.{i}.mlp.linear_fc1.weight",
             "model.layers.{i}.mlp.gate_proj.weight|model.layers.{i}.mlp.up_proj.weight", S::GateUp},
    NameRule{"decoder.layers.{i}.mlp.linear_fc2.weight", "model.layers.{i}.mlp.down_proj.weight"},
};

// §4.5: a critic's head is an nn.Linear(H -> 1); HF token classification names it score.
constexpr std::array kValueHeadRules{
    NameRule{"output_layer.weight", "score.weight"},
    NameRule{"output_layer.bias", "score.bias"},
};

// §5.2, routed experts named like Qwen (also DeepSeek-V3).
constexpr std::array kQwenExpertRules{
    NameRule{"decoder.layers.{i}.mlp.router.weight", "model.layers.{i}.mlp.gate.weight"},
    NameRule{"decoder.layers.{i}.mlp.experts.{e}.linear_fc1.weight",
             "model.layers.{i}.mlp.experts.{e}.gate_proj.weight|model.layers.{i}.mlp.experts.{e}.up_proj.weight",
             S::GateUp},
    NameRule{"decoder.layers.{i}.mlp.experts.{e}.linear_fc2.weight", "model.layers.{i}.mlp.experts.{e}.down_proj.weight"},
};

constexpr std::array kQwen2MoeSharedRules{
    NameRule{"decoder.layers.{i}.mlp.shared_experts.linear_fc1.weight",
             "model.layers.{i}.mlp.shared_expert.gate_proj.weight|model.layers.{i}.mlp.shared_expert.up_proj.weight",
             S::GateUp},
    NameRule{"decoder.layers.{i}.mlp.shared_experts.linear_fc2.weight", "model.layers.{i}.mlp.shared_expert.down_proj.weight"},
    NameRule{"decoder.layers.{i}.mlp.shared_experts.gate_weight", "model.layers.{i}.mlp.shared_expert_gate.weight"},
};

constexpr std::array kMixtralRules{
    NameRule{"decoder.layers.{i}.mlp.router.weight", "model.layers.{i}.block_sparse_moe.gate.weight"},
    NameRule{"decoder.layers.{i}.mlp.experts.{e}.linear_fc1.weight",
             "model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight|model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
             S::GateUp},
    NameRule{"decoder.layers.{i}.mlp.experts.{e}.linear_fc2.weight", "model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight"},
};

// §5.3 and §5.2 DeepSeek column.
constexpr std::array kDeepseekRules{
    NameRule{"decoder.layers.{i}.mlp.router.expert_bias", "model.layers.{i}.mlp.gate.e_score_correction_bias"},
    NameRule{"decoder.layers.{i}.mlp.shared_experts.linear_fc1.weight",
             "model.layers.{i}.mlp.shared_experts.gate_proj.weight|model.layers.{i}.mlp.shared_experts.up_proj.weight",
             S::GateUp},
    NameRule{"decoder.layers.{i}.mlp.shared_experts.linear_fc2.weight", "model.layers.{i}.mlp.shared_experts.down_proj.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_q_proj.weight", "model.layers.{i}.self_attn.q_proj.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_q_down_proj.weight", "model.layers.{i}.self_attn.q_a_proj.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_q_up_proj.layer_norm_weight", "model.layers.{i}.self_attn.q_a_layernorm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.q_layernorm.weight", "model.layers.{i}.self_attn.q_a_layernorm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_q_up_proj.weight", "model.layers.{i}.self_attn.q_b_proj.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_kv_down_proj.weight", "model.layers.{i}.self_attn.kv_a_proj_with_mqa.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_kv_up_proj.layer_norm_weight", "model.layers.{i}.self_attn.kv_a_layernorm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.kv_layernorm.weight", "model.layers.{i}.self_attn.kv_a_layernorm.weight"},
    NameRule{"decoder.layers.{i}.self_attention.linear_kv_up_proj.weight", "model.layers.{i}.self_attn.kv_b_proj.weight"},
};

// Megatron-Bridge's MTP block (canonical_mtp_key): the inner layer maps with the decoder rules.
constexpr std::array kMtpRules{
    NameRule{"decoder.layers.{i}.mtp.enorm.weight", "model.layers.{i}.enorm.weight"},
    NameRule{"decoder.layers.{i}.mtp.hnorm.weight", "model.layers.{i}.hnorm.weight"},
    NameRule{"decoder.layers.{i}.mtp.eh_proj.weight", "model.layers.{i}.eh_proj.weight"},
    NameRule{"decoder.layers.{i}.mtp.final_layernorm.weight", "model.layers.{i}.shared_head.norm.weight"},
};

struct ArchitectureEntry {
    std::string_view name;
    std::string_view family;
};

constexpr std::array kArchitectures{
    ArchitectureEntry{"LlamaForCausalLM", "dense"},
    ArchitectureEntry{"MistralForCausalLM", "dense"},
    ArchitectureEntry{"Qwen2ForCausalLM", "dense"},
    ArchitectureEntry{"Qwen3ForCausalLM", "dense"},
    ArchitectureEntry{"LlamaForTokenClassification", "dense"},
    ArchitectureEntry{"MistralForTokenClassification", "dense"},
    ArchitectureEntry{"Qwen2ForTokenClassification", "dense"},
    ArchitectureEntry{"Qwen3ForTokenClassification", "dense"},
    ArchitectureEntry{"Qwen2MoeForCausalLM", "qwen2_moe"},
    ArchitectureEntry{"Qwen3MoeForCausalLM", "qwen3_moe"},
    ArchitectureEntry{"MixtralForCausalLM", "mixtral"},
    ArchitectureEntry{"DeepseekV3ForCausalLM", "deepseek_v3"},
};

template <typename Rules>
void append(std::vector<NameRule>& out, const Rules& rules) {
    out.insert(out.end(), rules.begin(), rules.end());
}

// A config.json integer within its bounds (config_int); fallback -1: the key is required.
int64_t get_int(const HfConfig& c, const char* key, int64_t fallback = -1) {
    return config_int(c, key, fallback >= 0 ? std::optional<int64_t>(fallback) : std::nullopt);
}

// The expert tensor table grows with layers x experts: bound the product, not just each.
void check_expert_table_size(const HfConfig& c, const ArchitectureInfo& arch) {
    const char* key = arch.family == "mixtral"       ? "num_local_experts"
                      : arch.family == "deepseek_v3" ? "n_routed_experts"
                      : arch.family == "dense"       ? nullptr
                                                     : "num_experts";
    if (!key) return;
    const int64_t experts = get_int(c, key, 0);
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
void add_mtp_block_tensors(std::map<std::string, Shape>& req, int64_t i, int64_t H) {
    req[layer_name(i, "enorm.weight")] = {H};
    req[layer_name(i, "hnorm.weight")] = {H};
    req[layer_name(i, "eh_proj.weight")] = {H, 2 * H};
    req[layer_name(i, "shared_head.norm.weight")] = {H};
}

}  // namespace

bool has_tensor_table(const HfConfig& config) {
    if (config.architectures.empty()) return false;
    for (const auto& entry : kArchitectures)
        if (entry.name == config.architectures[0]) return true;
    return false;
}

std::optional<std::string> canonical_mtp_key(const std::string& key, int64_t layers, int64_t& depth) {
    static const std::regex inner(R"(^mtp\.layers\.(\d{1,6})\.(?:transformer_layer|mtp_model_layer)\.(.*)$)");
    static const std::regex own(R"(^mtp\.layers\.(\d{1,6})\.(enorm|hnorm|eh_proj|final_layernorm)\.(.*)$)");
    std::smatch m;
    const bool is_inner = std::regex_match(key, m, inner);
    if (!is_inner && !std::regex_match(key, m, own)) return std::nullopt;
    depth = std::stoll(m[1]);
    const std::string layer = "decoder.layers." + std::to_string(layers + depth) + ".";
    return is_inner ? layer + std::string(m[2]) : layer + "mtp." + std::string(m[2]) + "." + std::string(m[3]);
}

ArchitectureInfo architecture_for(const HfConfig& config, bool value_model, bool drop_mtp) {
    if (config.architectures.empty())
        throw Error(config.dir + "/config.json: no 'architectures'; cannot choose a name table");
    ArchitectureInfo arch;
    arch.name = config.architectures[0];
    for (const auto& entry : kArchitectures)
        if (entry.name == arch.name) arch.family = entry.family;
    if (arch.family.empty()) {
        std::string supported;
        for (const auto& entry : kArchitectures) supported += (supported.empty() ? "" : ", ") + std::string(entry.name);
        throw Error(config.dir + "/config.json: unknown architecture " + arch.name + "; supported: " + supported);
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
    append(arch.rules, kMtpRules);
    if (arch.value_model) append(arch.rules, kValueHeadRules);
    append(arch.rules, kDenseRules);
    if (arch.family == "qwen2_moe") {
        append(arch.rules, kQwenExpertRules);
        append(arch.rules, kQwen2MoeSharedRules);
    } else if (arch.family == "qwen3_moe") {
        append(arch.rules, kQwenExpertRules);
    } else if (arch.family == "mixtral") {
        append(arch.rules, kMixtralRules);
    } else if (arch.family == "deepseek_v3") {
        append(arch.rules, kQwenExpertRules);
        append(arch.rules, kDeepseekRules);
    }
    arch.expected = expected_hf_tensors(config, arch);
    return arch;
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
    static const std::regex layer(R"(^(decoder\.layers\.)(\d+)(\..*)$)");
    static const std::regex expert(R"(^(.*\.experts\.)(\d+)(\..*)$)");
    std::string pattern = key, layer_index, expert_index;
    std::smatch m;
    if (std::regex_match(pattern, m, layer)) {
        layer_index = m[2];
        pattern = std::string(m[1]) + "{i}" + std::string(m[3]);
    }
    if (std::regex_match(pattern, m, expert)) {
        expert_index = m[2];
        pattern = std::string(m[1]) + "{e}" + std::string(m[3]);
    }
    for (const NameRule& rule : arch.rules) {
        if (rule.megatron != pattern) continue;
        RuleMatch match;
        match.rule = &rule;
        match.hf_names = split_names(substitute_rule(rule.hf, layer_index, expert_index));
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
    const bool qkv_bias = arch.name.starts_with("Qwen2") || get_bool(c, "attention_bias", false);
    const bool qk_norm = arch.name.starts_with("Qwen3");
    check_expert_table_size(c, arch);
    const int64_t F = get_int(c, "intermediate_size");
    auto dense_mlp = [&](int64_t i, int64_t ffn, const std::string& prefix) {
        req[layer_name(i, prefix + "gate_proj.weight")] = {ffn, H};
        req[layer_name(i, prefix + "up_proj.weight")] = {ffn, H};
        req[layer_name(i, prefix + "down_proj.weight")] = {H, ffn};
    };
    for (int64_t i = 0; i < arch.layers + arch.mtp_layers; ++i) {
        if (i >= arch.layers) add_mtp_block_tensors(req, i, H);
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
                E = get_int(c, "num_experts");
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
