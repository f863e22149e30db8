#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// The config.json an output folder gets. It is the source's, byte for byte, unless the merge
// changed something config.json states: the weights' dtype (`torch_dtype` / `dtype`, also in a
// nested `text_config`), tied embeddings (--tie_word_embedding), or quantization
// (`quantization_config`). Then it is the source's JSON in the source's key order with
// those keys rewritten, so the metadata never contradicts the weights.
struct OutputConfig {
    std::optional<std::string> text;  // absent: the source's config.json is copied as it is
    std::vector<std::string> notes;   // what was rewritten, for the user
};

// The single dtype of the model's floating tensors (not the adapter's), if they share one.
std::optional<DType> weights_dtype(const TensorMapping& mapping);

// `source_text` is the source config.json as read (its key order is kept); `quantization_config`
// is null when the output is not quantized.
OutputConfig plan_output_config(const std::string& source_path, const std::string& source_text,
                                const TensorMapping& mapping, bool tie_word_embeddings,
                                const nlohmann::ordered_json& quantization_config);

// The same, reading `config.dir`/config.json.
OutputConfig plan_output_config(const HfConfig& config, const TensorMapping& mapping, bool tie_word_embeddings,
                                const nlohmann::ordered_json& quantization_config);

}  // namespace vmerge
