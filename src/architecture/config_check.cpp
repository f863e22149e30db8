#include "architecture/config_check.h"

#include <set>

#include "core/error.h"

namespace vmerge {

std::string list_names(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 12; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 12) out += ", ... (" + std::to_string(names.size()) + " in all)";
    return out;
}

void check_against_config(const TensorMapping& mapping, const HfConfig& config, const ArchitectureInfo& arch) {
    if (arch.family.empty()) return;  // a table without config_tensors (check_megatron_output notes it)
    std::vector<std::string> missing, unexpected, misshapen;
    std::set<std::string> produced;
    for (const auto& t : mapping.tensors) {
        produced.insert(t.name);
        auto it = arch.expected.required.find(t.name);
        const Shape* want = nullptr;
        if (it != arch.expected.required.end()) want = &it->second;
        else if (auto opt = arch.expected.optional.find(t.name); opt != arch.expected.optional.end()) want = &opt->second;
        if (!want) unexpected.push_back(t.name);
        else if (*want != t.shape)
            misshapen.push_back(t.name + " " + shape_to_string(t.shape) + " (config.json implies " + shape_to_string(*want) + ")");
    }
    for (const auto& [name, _] : arch.expected.required)
        if (!produced.count(name)) missing.push_back(name);
    std::string message;
    if (!missing.empty()) message += "\n  missing: " + list_names(missing);
    if (!unexpected.empty()) message += "\n  not part of " + arch.name + ": " + list_names(unexpected);
    if (!misshapen.empty()) message += "\n  wrong shape: " + list_names(misshapen);
    // --is_value_model over a causal LM: its head has a row per token, not per label.
    for (const auto& t : mapping.tensors)
        if (arch.value_model && t.name == "score.weight" && !t.shape.empty() && t.shape[0] == arch.vocab && arch.vocab > 1)
            message += "\n  score.weight has vocab_size (" + std::to_string(arch.vocab) + ") rows: a language-model head, "
                       "not a value head; drop --is_value_model to merge a causal LM";
    if (!message.empty())
        throw Error("the merged tensors do not match what " + config.dir + "/config.json (" + arch.name + ") implies:" +
                    message);
}

}  // namespace vmerge
