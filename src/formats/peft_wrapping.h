#pragma once
#include <optional>
#include <string>

namespace vmerge {

// The prefix PeftModel puts before the wrapped model's names.
inline constexpr const char* kPeftPrefix = "base_model.model.";

// A tensor name of a PEFT-wrapped state dict (PeftModel.state_dict()) seen from the model it
// wraps. PEFT puts kPeftPrefix before the model's names and a segment of its own inside an
// adapted module's: q_proj.base_layer.weight, q_proj.lora_A.default.weight,
// score.original_module.weight, score.modules_to_save.default.weight. A rule written for the
// model's own names (an architecture table's saved-name rules) matches model_name(), and
// rewrapped() puts the renamed model name back into the same wrapping, so the base weight and
// its adapter factors are renamed alike. A name with neither prefix nor segment is its own
// model name.
struct PeftWrapping {
    std::string prefix;      // kPeftPrefix or ""
    std::string model;       // the name in the wrapped model (lora_A/B: the weight they adapt)
    size_t module_end = 0;   // model[0, module_end) is the module path, the rest its parameter
    std::string peft_tail;   // what follows the module path in the PEFT name; "" when unwrapped

    bool wrapped() const { return !peft_tail.empty(); }
    bool peft() const { return wrapped() || !prefix.empty(); }
    const std::string& model_name() const { return model; }
    std::string module() const { return model.substr(0, module_end); }
    // What follows the module path in the model name: ".weight", ".bias".
    std::string parameter() const { return model.substr(module_end); }
    // The PEFT name of the tensor whose model name has become `renamed`. nullopt for a wrapped
    // tensor when `renamed` no longer ends with the same parameter (a rule that renames the
    // parameter itself: PEFT's segment sits between module and parameter, so it cannot follow).
    std::optional<std::string> rewrapped(const std::string& renamed) const;
};

// `name` taken apart as above. The segments are those is_peft_name (mapping/peft_names.h)
// recognises; malformed forms are taken apart as far as they go, and mapping/peft_names.h
// names them in its errors.
PeftWrapping peft_wrapping(const std::string& name);

}  // namespace vmerge
