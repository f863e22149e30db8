#include "mapping/peft_names.h"

#include <algorithm>

#include "core/error.h"

namespace vmerge {
namespace {

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
    for (size_t i = 0; i < inv.parsed.size(); ++i) {
        if (inv.parsed[i].kind == K::Plain || inv.parsed[i].kind == K::Base) {
            if (!inv.model_index.emplace(inv.parsed[i].name, i).second)
                throw Error(where + ": '" + inv.parsed[i].name + "' appears twice once the PEFT names are removed");
        }
    }
    // The original is the frozen original_module copy, or, where the checkpoint left frozen
    // parameters out (HF Trainer under DeepSpeed), the base model's own tensor (--lora_base).
    for (const auto& [name, index] : inv.trained)
        if (!inv.originals.count(name) && !inv.model_index.count(name))
            throw Error(where + ": '" + mapping.tensors[index].name +
                        "' (modules_to_save) has no original: no original_module copy and no base tensor '" + name + "'");
    return inv;
}

namespace {

// A module with LoRA factors but no `weight`. PEFT's target_parameters wraps a bare parameter of
// any name (transformers 5's fused experts gate_up_proj [E, 2F, H] and down_proj) in a
// ParamWrapper whose factors hold one rank-r block per expert; that is no W + s·B·A of a 2-D
// weight, so such an adapter is refused by what it wraps rather than as a missing weight.
[[noreturn]] void refuse_adapter_without_weight(const PeftInventory& inv, const TensorMapping& mapping,
                                                const std::string& module, const std::string& where) {
    const std::string inside = module + ".";
    for (const auto& [name, index] : inv.model_index)
        if (name.starts_with(inside) && inv.parsed[index].kind == PeftName::Kind::Base)
            throw Error(where + ": module '" + module + "' has a LoRA adapter on a parameter other than its weight "
                        "(PEFT's target_parameters); it wraps '" + mapping.tensors[index].name +
                        "'. vmerge reads LoRA on Linear and Embedding weights only: leave target_parameters out of "
                        "the LoraConfig, or merge this adapter with PEFT");
    const std::string weight = module + ".weight";
    throw Error(where + ": module '" + module + "' has a LoRA adapter but no base weight '" + weight + "' (expected '" +
                kPeftPrefix + module + ".base_layer.weight')");
}

}  // namespace

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
        if (!inv.model_index.count(weight)) refuse_adapter_without_weight(inv, mapping, module, where);
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

}  // namespace vmerge
