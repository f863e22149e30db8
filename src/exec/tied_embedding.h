#pragma once
#include <cstdint>

#include "mapping/hf_config.h"
#include "mapping/tensor_mapping.h"

namespace vmerge {

// Tied embeddings write no lm_head.weight (the loader reuses model.embed_tokens.weight), so
// tying must never drop a trained head. When the embeddings are tied (config.json or
// --tie_word_embedding) and the mapping has an lm_head.weight, this rank compares its share
// of the rows (rank r of `ranks`) of lm_head.weight and model.embed_tokens.weight byte for
// byte, streaming row blocks of at most about `max_memory` / 4 through a CopyExecutor, and
// throws an Error naming both tensors (and the first differing row) when they differ, differ
// in shape or dtype, or the embedding is missing. Identical or absent heads pass.
void check_tied_head(const TensorMapping& mapping, const HfConfig& config, bool tie_word_embedding,
                     uint64_t max_memory, int rank, int ranks);

}  // namespace vmerge
