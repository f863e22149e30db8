#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

namespace vmerge {

// How the rows of one or more base (Hugging Face) tensors sit in one checkpoint tensor: each
// kind is a rule an architecture table can state (docs/architecture-tables.md), so a layout the
// values confirm becomes that rule.
enum class RowLayout {
    Same,         // row r is base row r (equal shapes)
    Vocab,        // a Megatron vocabulary: base rows first, padding rows after (split "vocab")
    RopePermute,  // torchtitan's interleaved RoPE rows (transform "rope_permute")
    Qkv,          // Megatron's fused q/k/v grouped per query group (split "qkv"): parts q, k, v
    GateUp,       // [gate; up] halves (split "gate_up"): parts gate, up
};

// What a layout needs beyond the shapes: the head counts, head dim and vocabulary config.json gives.
struct ModelShape {
    int64_t heads = 0;     // num_attention_heads
    int64_t kv_heads = 0;  // num_key_value_heads (heads when absent)
    int64_t head_dim = 0;  // head_dim, or hidden_size / heads
    int64_t vocab = 0;     // vocab_size: only a tensor of these rows can be a padded vocabulary
    // num_hidden_layers: torchtitan numbers its multi-token prediction layers apart
    // (mtp_layers.k is HF layer num_hidden_layers + k), so layer n also meets base layer n + this.
    int64_t layers = 0;
};

// One way `parts` base tensors could sit in a checkpoint tensor, with what locates their rows.
struct LayoutGuess {
    RowLayout layout = RowLayout::Same;
    std::vector<size_t> parts;  // base tensor indices, in the rule's `to` order
    int64_t rope_heads = 0;     // RopePermute: the head count
    std::string heads_key;      // RopePermute: the config.json key that gives it
};

// The checkpoint row that holds row `row` of part `part` under `guess`, for a checkpoint tensor
// of `source_rows` rows whose parts have `part_rows` rows each. Pure index arithmetic.
int64_t source_row_of(const LayoutGuess& guess, const ModelShape& heads, const std::vector<int64_t>& part_rows,
                      size_t part, int64_t row);

// A deterministic sample of rows [0, rows): up to `count` rows spread evenly over the tensor,
// the first and last included. The same rows every run, on every rank.
std::vector<int64_t> sample_rows(int64_t rows, int64_t count);

// Rows to compare for a tensor whose rows hold `row_length` elements: enough rows for a few
// hundred elements (a norm's or bias's rows are single elements), at least 8, at most 64.
int64_t sample_count(int64_t row_length);

// The rows of a tensor (its first axis; 1 for a scalar) and the elements of one row.
int64_t tensor_rows(const Shape& shape);
int64_t row_length(const Shape& shape);

const char* layout_name(RowLayout layout);

}  // namespace vmerge
