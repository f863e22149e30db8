#include "architecture/config_check.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace vmerge {

std::string list_names(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 12; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 12) out += ", ... (" + std::to_string(names.size()) + " in all)";
    return out;
}

namespace {

// The vocabulary rows a causal LM's head has (0 when config.json gives none).
int64_t vocab_rows(const HfConfig& config) {
    for (const auto* j : {&config.json, config.json.contains("text_config") ? &config.json["text_config"] : nullptr})
        if (j && j->is_object())
            if (auto it = j->find("vocab_size"); it != j->end() && it->is_number_integer()) return it->get<int64_t>();
    return 0;
}

}  // namespace

void check_against_config(const TensorMapping& mapping, const HfConfig& config, const ArchitectureInfo& arch) {
    if (arch.tensor_set_file.empty()) return;  // no tensor set (check_megatron_output notes it)
    try {
        check_against_config(mapping, config, arch.name, arch.expected, arch.value_model);
    } catch (const Error& e) {
        // A trainer may build the model without the MTP layers config.json declares (mbridge's
        // GLM-4.5 bridge does): the missing list alone does not say what to do about it.
        const bool holds_mtp = std::any_of(mapping.tensors.begin(), mapping.tensors.end(),
                                           [](const OutputTensor& t) { return t.name.ends_with(".enorm.weight"); });
        if (arch.mtp_layers == 0 || holds_mtp) throw;
        throw Error(std::string(e.what()) + "\n  config.json declares num_nextn_predict_layers " +
                    std::to_string(arch.mtp_layers) + " but the checkpoint holds no multi-token prediction layer "
                    "(mtp.layers.*): --drop_mtp writes the model without them (its config.json then says 0)");
    }
}

void check_against_config(const TensorMapping& mapping, const HfConfig& config, const std::string& architecture,
                          const ExpectedTensors& expected, bool value_model) {
    const int64_t vocab = vocab_rows(config);
    std::vector<std::string> missing, unexpected, misshapen;
    std::set<std::string> produced;
    for (const auto& t : mapping.tensors) {
        produced.insert(t.name);
        auto it = expected.required.find(t.name);
        const Shape* want = nullptr;
        if (it != expected.required.end()) want = &it->second;
        else if (auto opt = expected.optional.find(t.name); opt != expected.optional.end()) want = &opt->second;
        if (!want) unexpected.push_back(t.name);
        else if (*want != t.shape)
            misshapen.push_back(t.name + " " + shape_to_string(t.shape) + " (config.json implies " + shape_to_string(*want) + ")");
    }
    for (const auto& [name, _] : expected.required)
        if (!produced.count(name)) missing.push_back(name);
    std::string message;
    if (!missing.empty()) message += "\n  missing: " + list_names(missing);
    if (!unexpected.empty()) message += "\n  not part of " + architecture + ": " + list_names(unexpected);
    if (!misshapen.empty()) message += "\n  wrong shape: " + list_names(misshapen);
    // --is_value_model over a causal LM: its head has a row per token, not per label.
    for (const auto& t : mapping.tensors)
        if (value_model && t.name == "score.weight" && !t.shape.empty() && t.shape[0] == vocab && vocab > 1)
            message += "\n  score.weight has vocab_size (" + std::to_string(vocab) + ") rows: a language-model head, "
                       "not a value head; drop --is_value_model to merge a causal LM";
    if (!message.empty())
        throw Error("the merged tensors do not match what " + config.dir + "/config.json (" + architecture + ") implies:" +
                    message);
}

}  // namespace vmerge
