#include "mapping/lora_adapter.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "mapping/peft_names.h"

namespace vmerge {
namespace {

// The path PEFT knows `module` by: where a saved-name rule renamed it inside the PEFT wrapping
// (a VL model's model.language_model.* -> model.*), the run-time path the checkpoint had, which
// PEFT's own save_pretrained, target_modules and rank_pattern use; else the path itself.
std::string peft_module_path(const TensorMapping& mapping, const std::string& module) {
    const auto it = mapping.peft_run_time_modules.find(module);
    return it == mapping.peft_run_time_modules.end() ? module : it->second;
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
        d.scale = module_alpha(h, peft_module_path(mapping, module)) / (h.use_rslora ? std::sqrt(r) : r);
        delta_of[module + ".weight"] = deltas.size();
        deltas.push_back(std::move(d));
    }
    return deltas;
}

// Merge: the trained modules_to_save copy of `name`, in place of its original `original`.
OutputTensor trained_copy(const PeftInventory& inv, const TensorMapping& mapping, const std::string& name,
                          const OutputTensor& original, const std::string& where) {
    OutputTensor replacement = mapping.tensors[inv.trained.at(name)];
    replacement.name = name;
    if (replacement.shape != original.shape)
        throw Error(where + ": modules_to_save copy of '" + name + "' is " + shape_to_string(replacement.shape) +
                    ", the original " + shape_to_string(original.shape));
    return replacement;
}

// The mapping with PEFT names removed: base tensors under their HF names (each adapted weight
// pointing at its delta, Merge), then the adapter's tensors under PEFT names (Extract), their
// module paths those PEFT knows (peft_module_path).
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
            // A base tensor standing for an original_module the checkpoint left out (frozen).
            const bool replaced = mode == LoraMode::Merge && inv.trained.count(p.name) && !inv.originals.count(p.name);
            model.push_back(replaced ? trained_copy(inv, mapping, p.name, t, where) : std::move(t));
        } else if (p.kind == K::Original) {
            // Extract: the frozen copy is the base model's; Merge: the trained copy replaces it.
            t.name = p.name;
            model.push_back(mode == LoraMode::Merge ? trained_copy(inv, mapping, p.name, t, where) : std::move(t));
        } else if (mode == LoraMode::Extract) {
            static const std::map<K, const char*> suffix{{K::LoraA, ".lora_A.weight"}, {K::LoraB, ".lora_B.weight"},
                                                         {K::EmbeddingA, ".lora_embedding_A"},
                                                         {K::EmbeddingB, ".lora_embedding_B"}};
            const std::string module = peft_module_path(mapping, p.module);
            t.name = kPeftPrefix + module + (p.kind == K::Trained ? p.name.substr(p.module.size()) : suffix.at(p.kind));
            t.adapter = true;
            adapter.push_back(std::move(t));
        }
    }
    for (auto& t : adapter) model.push_back(std::move(t));
    return model;
}


// The task_type PEFT loads the adapter with when no adapter_config.json beside the checkpoint
// states one: lora_train_meta.json's, else the caller's (a value model's TOKEN_CLS), else the
// model's head: a score head without lm_head is a value model (a verl critic saved with the
// actor's *ForCausalLM config.json), anything else a causal LM.
std::string adapter_task_type(const PeftInventory& inv, const LoraOptions& options, const LoraHyperparameters& h) {
    if (!h.train_meta_task_type.empty()) return h.train_meta_task_type;
    if (!options.task_type.empty()) return options.task_type;
    auto holds = [&](const char* name) { return inv.model_index.count(name) > 0 || inv.originals.count(name) > 0; };
    return holds("score.weight") && !holds("lm_head.weight") ? "TOKEN_CLS" : "CAUSAL_LM";
}

// Extract: what the adapter_config.json PEFT loads the written adapter with states
// (output/peft_adapter_config.h writes it).
ExtractedAdapter extracted_adapter(const TensorMapping& mapping, const PeftInventory& inv, const LoraOptions& options,
                                   const LoraHyperparameters& h, const nlohmann::json& rank_pattern, int64_t config_r) {
    std::vector<std::string> base_modules, adapted_modules;
    for (const auto& t : mapping.tensors)
        if (!t.adapter && t.name.ends_with(".weight"))
            base_modules.push_back(peft_module_path(mapping, t.name.substr(0, t.name.size() - 7)));
    for (const auto& module : inv.module_order) adapted_modules.push_back(peft_module_path(mapping, module));
    ExtractedAdapter a;
    a.target_modules = peft_target_modules(adapted_modules, base_modules);
    for (const auto& module : inv.saved_modules) a.modules_to_save.push_back(peft_module_path(mapping, module));
    std::sort(a.modules_to_save.begin(), a.modules_to_save.end());
    a.alpha = h.alpha;
    a.r = config_r;
    a.rank_pattern = rank_pattern;
    a.alpha_pattern = h.alpha_pattern;
    a.use_rslora = h.use_rslora;
    a.found_config = h.found_config;
    a.base_model_name_or_path = options.base_model_name_or_path;
    a.task_type = adapter_task_type(inv, options, h);
    return a;
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
        const std::string path = peft_module_path(mapping, module);
        if (module_rank(h, path).value_or(config_r) != r) rank_pattern[path] = r;
    }

    std::map<std::string, size_t> delta_of;  // weight name -> delta index (Merge)
    std::vector<LoraDelta> deltas;
    if (options.mode == LoraMode::Merge) deltas = lora_deltas(inv, mapping, h, delta_of);
    mapping.tensors = rewrite_peft_tensors(inv, mapping, options.mode, delta_of, where);
    mapping.lora_deltas = std::move(deltas);
    if (options.mode == LoraMode::Extract) result.extracted = extracted_adapter(mapping, inv, options, h, rank_pattern, config_r);
    add_lora_notes(result, inv, options, h, rank_pattern);
    return result;
}

}  // namespace vmerge
