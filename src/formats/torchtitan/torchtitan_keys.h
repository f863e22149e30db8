#pragma once
#include <string>

#include "torch/dcp_metadata.h"

namespace vmerge {

// True when `key` is one of torchtitan's model FQNs (tok_embeddings.weight, layers.N.attention...,
// layers.N.feed_forward..., layers.N.moe...): how a torchtitan step is told from other DCP folders.
bool is_torchtitan_model_key(const std::string& key);
// The first such key of `meta` ("" when none).
std::string first_torchtitan_key(const DcpMetadata& meta);

// True when `key` belongs to the training state torchtitan saves beside the model in a full
// checkpoint (optimizer, lr_scheduler, dataloader, train_state): never an output tensor.
bool is_torchtitan_training_state(const std::string& key);

}  // namespace vmerge
