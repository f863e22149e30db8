#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "architecture/hf_config.h"
#include "architecture/mtp_shared_copies.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// Copies of the embedding or the output head that a merge writes only once: each is compared
// byte for byte with the tensor it copies before it is dropped, so no trained values are lost.

// The first row, among this rank's share (rank r of `ranks`) of the rows, where tensors `a`
// and `b` of `mapping` (same shape and dtype) differ as the executor assembles them; nullopt
// when equal. Streams row blocks of at most about `max_memory` / 4 through a CopyExecutor.
std::optional<int64_t> first_differing_row(const TensorMapping& mapping, size_t a, size_t b, uint64_t max_memory,
                                           int rank, int ranks);

// Tied embeddings write no lm_head.weight (the loader reuses model.embed_tokens.weight), so
// tying must never drop a trained head. When the embeddings are tied (config.json or
// --tie_word_embedding) and the mapping has an lm_head.weight, this rank compares its share
// of the rows of lm_head.weight and model.embed_tokens.weight and throws an Error naming both
// tensors (and the first differing row) when they differ, differ in shape or dtype, or the
// embedding is missing. Identical or absent heads pass.
void check_tied_head(const TensorMapping& mapping, const HfConfig& config, bool tie_word_embedding,
                     uint64_t max_memory, int rank, int ranks);

// Every MTP layer copy the checkpoint holds (`copies[i].read`, set aside by
// set_aside_mtp_shared_copies) against the tensor it copies in `mapping` (mtp_copy_original;
// `tied` as there): an Error naming both when the original is missing, when they differ in
// shape or dtype, or (this rank's share of the rows) in value. Run before LoRA updates are
// attached: what is compared are the checkpoint's own bytes.
void check_mtp_shared_copies(const TensorMapping& mapping, const std::vector<MtpSharedCopy>& copies, bool tied,
                             uint64_t max_memory, int rank, int ranks);

}  // namespace vmerge
