#include "formats/peft_wrapping.h"

#include <vector>

namespace vmerge {
namespace {

// PEFT's segments after a module path: the adapter factors stand for the module's weight, the
// other segments keep the parameter name after them (after the adapter name for modules_to_save).
enum class Segment { None, Factor, Wrapper, AdapterCopy };

Segment segment_kind(const std::string& part) {
    if (part == "lora_A" || part == "lora_B" || part == "lora_embedding_A" || part == "lora_embedding_B" ||
        part == "lora_magnitude_vector")
        return Segment::Factor;
    if (part == "base_layer" || part == "original_module") return Segment::Wrapper;
    if (part == "modules_to_save") return Segment::AdapterCopy;
    return Segment::None;
}

}  // namespace

std::optional<std::string> PeftWrapping::rewrapped(const std::string& renamed) const {
    if (!wrapped()) return prefix + renamed;
    const std::string param = parameter();
    if (renamed.size() < param.size() || renamed.compare(renamed.size() - param.size(), param.size(), param) != 0)
        return std::nullopt;
    return prefix + renamed.substr(0, renamed.size() - param.size()) + peft_tail;
}

PeftWrapping peft_wrapping(const std::string& name) {
    PeftWrapping w;
    const bool prefixed = name.starts_with(kPeftPrefix);
    if (prefixed) w.prefix = kPeftPrefix;
    const std::string inner = prefixed ? name.substr(w.prefix.size()) : name;
    // Walk the dot-separated parts; `start` is where the current part begins in `inner`.
    for (size_t start = 0; start < inner.size();) {
        const size_t dot = inner.find('.', start);
        const size_t end = dot == std::string::npos ? inner.size() : dot;
        const Segment kind = start == 0 ? Segment::None : segment_kind(inner.substr(start, end - start));
        const size_t module_end = start - 1;  // the dot before this part
        if (kind == Segment::Factor) {
            w.model = inner.substr(0, module_end) + ".weight";
            w.module_end = module_end;
            w.peft_tail = inner.substr(module_end);
            return w;
        }
        if (kind != Segment::None && dot != std::string::npos) {
            // base_layer.<param>, original_module.<param>, modules_to_save.<adapter>.<param>
            size_t param_dot = dot;
            if (kind == Segment::AdapterCopy) param_dot = inner.find('.', dot + 1);
            if (param_dot != std::string::npos) {
                w.model = inner.substr(0, module_end) + inner.substr(param_dot);
                w.module_end = module_end;
                w.peft_tail = inner.substr(module_end);
                return w;
            }
        }
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    w.model = inner;
    const size_t last_dot = inner.rfind('.');
    w.module_end = last_dot == std::string::npos ? inner.size() : last_dot;
    return w;
}

}  // namespace vmerge
