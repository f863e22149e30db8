#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "vmerge/dtype.h"

namespace vmerge {

// The parts of a Hugging Face config.json that change how a merge is written.
struct HfConfig {
    std::string dir;
    nlohmann::json json;
    std::optional<DType> dtype;  // "dtype" (transformers >= 4.56) or "torch_dtype"
    bool tie_word_embeddings = false;
    std::vector<std::string> architectures;
};

// Reads <dir>/config.json; a missing file is an Error naming it.
HfConfig load_hf_config(const std::string& dir);

}  // namespace vmerge
