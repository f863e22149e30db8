#pragma once
#include <optional>
#include <string>
#include <vector>

#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

enum class DTypeChoice { Auto, Keep, BF16, F16, F32 };
DTypeChoice parse_dtype_choice(const std::string& text);  // auto|keep|bf16|fp16|fp32

// Rules that hold for every backend: the output dtype of floating tensors (auto = the
// config's dtype, as verl writes), and no lm_head.weight when the embeddings are tied.
// Returns notes for the user about what was changed.
std::vector<std::string> apply_output_rules(TensorMapping& mapping, const HfConfig& config,
                                            DTypeChoice choice, bool tie_word_embeddings);

}  // namespace vmerge
