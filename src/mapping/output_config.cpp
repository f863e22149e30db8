#include "mapping/output_config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/input_file.h"

namespace vmerge {
namespace {

// The objects whose dtype and tie keys transformers reads: the config itself and, for
// multimodal models, its `text_config`.
std::vector<nlohmann::ordered_json*> config_levels(nlohmann::ordered_json& config) {
    std::vector<nlohmann::ordered_json*> levels{&config};
    auto text = config.find("text_config");
    if (text != config.end() && text->is_object()) levels.push_back(&*text);
    return levels;
}

// Rewrites every dtype key the source uses (transformers < 4.56 writes `torch_dtype`, 5.x
// `dtype`) that names another dtype than the weights'. Keys the source lacks stay absent.
void rewrite_dtype_keys(nlohmann::ordered_json& config, DType written, OutputConfig& out) {
    const std::string name(torch_name(written));
    for (nlohmann::ordered_json* level : config_levels(config)) {
        const std::string where = level == &config ? "" : "text_config.";
        for (const char* key : {"torch_dtype", "dtype"}) {
            auto it = level->find(key);
            if (it == level->end() || !it->is_string()) continue;
            const auto stated = dtype_from_torch_name(it->get<std::string>());
            if (stated && *stated == written) continue;
            out.notes.push_back("config.json: " + where + key + " '" + it->get<std::string>() + "' -> '" + name +
                                "', the dtype the weights are written in");
            *it = name;
        }
    }
}

void set_tied(nlohmann::ordered_json& config, OutputConfig& out) {
    for (nlohmann::ordered_json* level : config_levels(config)) {
        const bool top = level == &config;
        auto it = level->find("tie_word_embeddings");
        if (!top && it == level->end()) continue;
        if (it != level->end() && it->is_boolean() && it->get<bool>()) continue;
        out.notes.push_back(std::string("config.json: ") + (top ? "" : "text_config.") +
                            "tie_word_embeddings -> true (--tie_word_embedding: no lm_head.weight is written)");
        (*level)["tie_word_embeddings"] = true;
    }
}

// A config that declares multi-token prediction layers the output does not hold (--drop_mtp,
// or an HF model transformers loaded without them) says 0, so no loader looks for them.
void clear_missing_mtp(nlohmann::ordered_json& config, const TensorMapping& mapping, OutputConfig& out) {
    auto it = config.find("num_nextn_predict_layers");
    if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) return;
    for (const auto& t : mapping.tensors)
        if (t.name.ends_with(".enorm.weight")) return;
    out.notes.push_back("config.json: num_nextn_predict_layers " + std::to_string(it->get<int64_t>()) +
                        " -> 0 (no multi-token prediction layer is written)");
    *it = 0;
}

// Whether the output holds quantized weights (FP8 codes, packed integers or their scales).
bool writes_quantized(const TensorMapping& mapping) {
    for (const auto& t : mapping.tensors)
        if (t.role != OutputTensor::Role::Plain && t.role != OutputTensor::Role::Constant) return true;
        else if (!t.adapter && (t.dtype == DType::F8_E4M3 || t.dtype == DType::F8_E5M2)) return true;
    return false;
}

// The source's own quantization_config (a block-FP8 folder read dequantized, or a model trained
// in bf16 from a quantized release, whose config still says FP8) would make loaders expect
// quantized tensors the output does not hold.
void drop_stale_quantization(nlohmann::ordered_json& config, const TensorMapping& mapping, OutputConfig& out) {
    const auto it = config.find("quantization_config");
    if (it == config.end() || writes_quantized(mapping)) return;
    std::string method;
    if (it->is_object() && it->contains("quant_method") && (*it)["quant_method"].is_string())
        method = " ('" + (*it)["quant_method"].get<std::string>() + "')";
    out.notes.push_back("config.json: quantization_config" + method + " removed: the weights are written unquantized");
    config.erase(it);
}

}  // namespace

std::optional<DType> weights_dtype(const TensorMapping& mapping) {
    std::optional<DType> found;
    for (const auto& t : mapping.tensors) {
        // FP8 codes and F32 block or global scales are not the model dtype config.json states.
        if (t.adapter || !is_floating(t.dtype) || t.quantized_as_stored || t.role == OutputTensor::Role::QuantPacked ||
            t.role == OutputTensor::Role::QuantScale || t.role == OutputTensor::Role::QuantGlobalScale)
            continue;
        if (found && *found != t.dtype) return std::nullopt;
        found = t.dtype;
    }
    return found;
}

OutputConfig plan_output_config(const std::string& source_path, const std::string& source_text,
                                const TensorMapping& mapping, bool tie_word_embeddings,
                                const nlohmann::ordered_json& quantization_config) {
    nlohmann::ordered_json config;
    try {
        config = nlohmann::ordered_json::parse(source_text);
    } catch (const nlohmann::json::exception& e) {
        throw Error(source_path + ": not valid JSON: " + e.what());
    }
    if (!config.is_object()) throw Error(source_path + ": expected a JSON object");
    OutputConfig out;
    if (const auto written = weights_dtype(mapping)) rewrite_dtype_keys(config, *written, out);
    if (tie_word_embeddings) set_tied(config, out);
    clear_missing_mtp(config, mapping, out);
    if (!quantization_config.is_null()) config["quantization_config"] = quantization_config;
    else drop_stale_quantization(config, mapping, out);
    if (!out.notes.empty() || !quantization_config.is_null()) out.text = config.dump(2) + "\n";
    return out;
}

OutputConfig plan_output_config(const HfConfig& config, const TensorMapping& mapping, bool tie_word_embeddings,
                                const nlohmann::ordered_json& quantization_config) {
    const std::string path = config.dir + "/config.json";
    if (!config.text.empty())  // read once, by rank 0 (read_on_rank_zero)
        return plan_output_config(path, config.text, mapping, tie_word_embeddings, quantization_config);
    return plan_output_config(path, read_small_file(path, kMaxJsonBytes, "a model config"), mapping, tie_word_embeddings,
                              quantization_config);
}

}  // namespace vmerge
