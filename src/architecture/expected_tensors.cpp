#include "architecture/expected_tensors.h"

#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {
namespace {

using Pieces = ConfigTensors;

std::string layer_name(int64_t i, const std::string& rest) { return "model.layers." + std::to_string(i) + "." + rest; }

bool get_bool(const HfConfig& c, const char* key, bool fallback) {
    auto it = c.json.find(key);
    return it != c.json.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

bool has(const HfConfig& c, const char* key) {
    auto it = c.json.find(key);
    return it != c.json.end() && !it->is_null();
}

// The routed experts: the key the pieces name. A Qwen MoE config's `num_experts` is what the
// hub's configs write; transformers 5 keeps it as `num_local_experts` (an attribute map) and
// save_pretrained writes that name instead. Both given and different is an error.
int64_t expert_count(const HfConfig& c, const Pieces& pieces, std::optional<int64_t> fallback = std::nullopt) {
    if (pieces.expert_count != "num_experts") return config_int(c, pieces.expert_count, fallback);
    const bool local = c.json.contains("num_local_experts"), named = c.json.contains("num_experts");
    if (local && named && config_int(c, "num_experts") != config_int(c, "num_local_experts"))
        throw Error(c.dir + "/config.json: num_experts " + c.json["num_experts"].dump() + " and num_local_experts " +
                    c.json["num_local_experts"].dump() + " disagree");
    return config_int(c, named || !local ? "num_experts" : "num_local_experts", fallback);
}

// The expert tensor table grows with layers x experts: bound the product, not just each.
void check_expert_table_size(const HfConfig& c, const ArchitectureInfo& arch) {
    if (arch.tensors.experts == Pieces::Experts::None) return;
    const int64_t experts = expert_count(c, arch.tensors, 0);
    if (arch.layers * experts > kMaxLayerExperts)
        throw Error(c.dir + "/config.json: num_hidden_layers " + std::to_string(arch.layers) + " x " +
                    arch.tensors.expert_count + " " + std::to_string(experts) + " = " +
                    std::to_string(arch.layers * experts) + " expert blocks: expected at most " +
                    std::to_string(kMaxLayerExperts));
}

// Embedding, final norm, and the head: lm_head unless tied, a value model's score head.
void add_model_ends(ExpectedTensors& out, const HfConfig& c, const ArchitectureInfo& arch) {
    const int64_t H = arch.hidden, V = arch.vocab;
    out.required["model.embed_tokens.weight"] = {V, H};
    out.required["model.norm.weight"] = {H};
    if (arch.value_model) {
        const int64_t labels = config_int(c, "num_labels", 1);
        out.required["score.weight"] = {labels, H};
        out.optional["score.bias"] = {labels};
    } else if (!c.tie_word_embeddings) {
        out.required["lm_head.weight"] = {V, H};
    }
}

// An MTP depth's own tensors (Megatron-Bridge names); its decoder layer follows as any other.
// The release's copies of the embedding and output head are optional: Megatron-Bridge writes
// none, and vmerge adds them after this check (mtp_shared_copies.h) unless told not to.
void add_mtp_block(ExpectedTensors& out, const ArchitectureInfo& arch, int64_t i) {
    const int64_t H = arch.hidden, V = arch.vocab;
    out.required[layer_name(i, "enorm.weight")] = {H};
    out.required[layer_name(i, "hnorm.weight")] = {H};
    out.required[layer_name(i, "eh_proj.weight")] = {H, 2 * H};
    out.required[layer_name(i, "shared_head.norm.weight")] = {H};
    if (!arch.mtp_shared_copies) return;
    out.optional[layer_name(i, "embed_tokens.weight")] = {V, H};
    if (!arch.value_model) out.optional[layer_name(i, "shared_head.head.weight")] = {V, H};
}

// q/k/v/o_proj with kv_heads key-value heads; biases and per-head norms as the pieces say.
void add_gqa_attention(ExpectedTensors& out, const HfConfig& c, const ArchitectureInfo& arch, int64_t i) {
    auto& req = out.required;
    const int64_t H = arch.hidden, nq = arch.heads, ng = arch.kv_heads, d = arch.head_dim;
    req[layer_name(i, "self_attn.q_proj.weight")] = {nq * d, H};
    req[layer_name(i, "self_attn.k_proj.weight")] = {ng * d, H};
    req[layer_name(i, "self_attn.v_proj.weight")] = {ng * d, H};
    req[layer_name(i, "self_attn.o_proj.weight")] = {H, nq * d};
    if (arch.tensors.qkv_bias || get_bool(c, "attention_bias", false)) {
        req[layer_name(i, "self_attn.q_proj.bias")] = {nq * d};
        req[layer_name(i, "self_attn.k_proj.bias")] = {ng * d};
        req[layer_name(i, "self_attn.v_proj.bias")] = {ng * d};
    }
    if (arch.tensors.qk_norm) {
        req[layer_name(i, "self_attn.q_norm.weight")] = {d};
        req[layer_name(i, "self_attn.k_norm.weight")] = {d};
    }
}

// DeepSeek's multi-head latent attention: q through a low-rank q_a/q_b pair when q_lora_rank
// is set (else q_proj), k and v through kv_a_proj_with_mqa and kv_b_proj.
void add_mla_attention(ExpectedTensors& out, const HfConfig& c, const ArchitectureInfo& arch, int64_t i) {
    auto& req = out.required;
    const int64_t H = arch.hidden, nq = arch.heads;
    const int64_t nope = config_int(c, "qk_nope_head_dim"), rope = config_int(c, "qk_rope_head_dim");
    const int64_t vdim = config_int(c, "v_head_dim"), kv_lora = config_int(c, "kv_lora_rank");
    if (has(c, "q_lora_rank")) {
        const int64_t q_lora = config_int(c, "q_lora_rank");
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
}

void add_swiglu(ExpectedTensors& out, int64_t i, int64_t hidden, int64_t ffn, const std::string& prefix) {
    out.required[layer_name(i, prefix + "gate_proj.weight")] = {ffn, hidden};
    out.required[layer_name(i, prefix + "up_proj.weight")] = {ffn, hidden};
    out.required[layer_name(i, prefix + "down_proj.weight")] = {hidden, ffn};
}

// Whether decoder layer `i` is a MoE layer under the pieces' layer pattern.
bool is_moe_layer(const HfConfig& c, const Pieces& pieces, int64_t experts, int64_t i) {
    switch (pieces.moe_layers) {
        case Pieces::MoeLayers::Every: return true;
        case Pieces::MoeLayers::FirstKDense:
            return i >= config_int(c, "first_k_dense_replace", 0) && i % config_int(c, "moe_layer_freq", 1) == 0;
        case Pieces::MoeLayers::SparseStep: {
            if (auto it = c.json.find("mlp_only_layers"); it != c.json.end() && it->is_array())
                for (const auto& l : *it)
                    if (l.is_number_integer() && l.get<int64_t>() == i) return false;
            return experts > 0 && (i + 1) % config_int(c, "decoder_sparse_step", 1) == 0;
        }
    }
    return true;
}

// A MoE layer's router and routed experts, then what the pieces put beside them.
void add_moe_block(ExpectedTensors& out, const HfConfig& c, const ArchitectureInfo& arch, int64_t experts, int64_t i) {
    const int64_t H = arch.hidden;
    const Pieces& p = arch.tensors;
    if (p.experts == Pieces::Experts::Mixtral) {
        const int64_t F = config_int(c, "intermediate_size");
        out.required[layer_name(i, "block_sparse_moe.gate.weight")] = {experts, H};
        for (int64_t e = 0; e < experts; ++e) {
            const std::string prefix = "block_sparse_moe.experts." + std::to_string(e) + ".";
            out.required[layer_name(i, prefix + "w1.weight")] = {F, H};
            out.required[layer_name(i, prefix + "w3.weight")] = {F, H};
            out.required[layer_name(i, prefix + "w2.weight")] = {H, F};
        }
        return;
    }
    const int64_t Fm = config_int(c, "moe_intermediate_size");
    out.required[layer_name(i, "mlp.gate.weight")] = {experts, H};
    for (int64_t e = 0; e < experts; ++e) add_swiglu(out, i, H, Fm, "mlp.experts." + std::to_string(e) + ".");
    if (p.router_bias) out.required[layer_name(i, "mlp.gate.e_score_correction_bias")] = {experts};
    if (p.shared_experts == Pieces::SharedExperts::Gated) {
        add_swiglu(out, i, H, config_int(c, "shared_expert_intermediate_size"), "mlp.shared_expert.");
        out.required[layer_name(i, "mlp.shared_expert_gate.weight")] = {1, H};
    } else if (p.shared_experts == Pieces::SharedExperts::Summed) {
        const int64_t shared = config_int(c, "n_shared_experts", 0);
        if (shared > 0) add_swiglu(out, i, H, Fm * shared, "mlp.shared_experts.");
    }
}

}  // namespace

ExpectedTensors expected_hf_tensors(const HfConfig& c, const ArchitectureInfo& arch) {
    ExpectedTensors out;
    add_model_ends(out, c, arch);
    check_expert_table_size(c, arch);
    const Pieces& p = arch.tensors;
    const int64_t F = config_int(c, "intermediate_size");
    const int64_t experts = p.experts == Pieces::Experts::None ? 0 : expert_count(c, p);
    for (int64_t i = 0; i < arch.layers + arch.mtp_layers; ++i) {
        if (i >= arch.layers) add_mtp_block(out, arch, i);
        out.required[layer_name(i, "input_layernorm.weight")] = {arch.hidden};
        out.required[layer_name(i, "post_attention_layernorm.weight")] = {arch.hidden};
        if (p.attention == Pieces::Attention::Mla) add_mla_attention(out, c, arch, i);
        else add_gqa_attention(out, c, arch, i);
        if (p.experts != Pieces::Experts::None && is_moe_layer(c, p, experts, i)) add_moe_block(out, c, arch, experts, i);
        else add_swiglu(out, i, arch.hidden, F, "mlp.");
    }
    return out;
}

}  // namespace vmerge
