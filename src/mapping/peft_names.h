#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"
#include "formats/peft_wrapping.h"  // kPeftPrefix

namespace vmerge {

// The names of a PEFT-wrapped state dict (PeftModel.state_dict()): taken apart, grouped into
// adapter pairs, and checked (lora_adapter.h merges or extracts what they name).

// A state-dict name of a PeftModel, taken apart.
struct PeftName {
    enum class Kind { Plain, Base, LoraA, LoraB, EmbeddingA, EmbeddingB, Original, Trained } kind = Kind::Plain;
    std::string module;   // the wrapped module's path (Base/Lora*/Original/Trained)
    std::string name;     // the HF name this tensor has in the model (Plain/Base/Original/Trained)
    std::string adapter;  // the adapter name between lora_A. and .weight ("default")
};

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

// Every PEFT name of `mapping` taken apart and grouped; kinds a plain W + s·B·A would merge
// wrongly (DoRA, lora_bias, trainable tokens, other PEFT methods) and several adapters are an
// Error naming the tensor. `where` names the checkpoint in errors.
PeftInventory inventory_peft_names(const TensorMapping& mapping, const std::string& where);

// Every A/B pair complete and shaped as a rank-r update of its base weight; the distinct ranks.
std::set<int64_t> check_lora_pairs(const PeftInventory& inv, const TensorMapping& mapping, const std::string& where);

// adapter_config.json's target_modules for adapters on `adapted` (module paths such as
// model.layers.0.self_attn.q_proj) in a model whose modules are `base`. PEFT matches an entry
// against every module path that equals it or ends with "." + it, so a leaf name (q_proj) is
// written only when every base module with that leaf has an adapter; otherwise the adapted
// modules' full paths are, and PEFT creates no adapter where none was trained. Sorted.
std::vector<std::string> peft_target_modules(const std::vector<std::string>& adapted, const std::vector<std::string>& base);

// Whether a tensor name belongs to a PEFT-wrapped state dict.
bool is_peft_name(const std::string& name);

}  // namespace vmerge
