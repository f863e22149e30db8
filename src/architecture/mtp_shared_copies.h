#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// DeepSeek-V3's release (and mbridge's export) holds, in every multi-token prediction layer
// model.layers.{L+k}, a copy of the embedding and one of the output head, and vLLM's DeepSeek MTP
// loader reads the layer's own names (docs/reference/model-families.md §2). One copy per MTP layer
// and original, for an architecture whose 'hf' table says mtp_shared_copies.
struct MtpSharedCopy {
    std::string name;  // model.layers.{L+k}.embed_tokens.weight or ...shared_head.head.weight
    bool head = false;  // a copy of lm_head.weight (else of model.embed_tokens.weight)
    // The checkpoint's own copy, set aside from the mapping: compared with the original
    // (check_mtp_shared_copies), never written itself: the output's copy is made from the original.
    std::optional<OutputTensor> read;
};

constexpr const char* kEmbeddingName = "model.embed_tokens.weight";
constexpr const char* kHeadName = "lm_head.weight";

// The copies the MTP layers of `mapping` take (a layer is an MTP layer when it holds
// enorm.weight), in layer order, embedding copy first. Any copy `mapping` already holds is
// moved out of it into `read`.
std::vector<MtpSharedCopy> set_aside_mtp_shared_copies(TensorMapping& mapping);

// The name of the tensor `copy` duplicates in `mapping`: the embedding, or lm_head.weight (the
// embedding when the word embeddings are `tied` and no lm_head.weight is there); "" when
// `mapping` holds none (a value model, with score.weight, has no output head).
std::string mtp_copy_original(const TensorMapping& mapping, const MtpSharedCopy& copy, bool tied);

// Adds each copy to `mapping` as a duplicate of its original (the same box copies: the same
// source bytes, LoRA update and dtype), after the last tensor of its layer. Returns notes for
// the user (what was written; a copy with no original to take it from).
std::vector<std::string> add_mtp_shared_copies(TensorMapping& mapping, const std::vector<MtpSharedCopy>& copies,
                                               bool tied);

}  // namespace vmerge
