#pragma once
#include <cstdint>
#include <string>
#include <utility>
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
    // A vision tower's fused qkv grouped per head, [q_h; k_h; v_h] for every head h, holding the
    // base's one fused [Q; K; V] tensor (split "qkv_per_head", groups: the head count).
    QkvPerHead,
    // A fork's fused [Q; K; V], the three one after another, not grouped per query group (parts
    // q, k, v): recognised so that map can say so, but no table rule states it (a refusal).
    PlainQkv,
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
    // The head counts of the other towers config.json describes, each with the key that gives
    // it ({12, "vision_config.num_heads"}): a vision tower's qkv may be grouped per head.
    std::vector<std::pair<int64_t, std::string>> tower_heads;
};

// One way `parts` base tensors could sit in a checkpoint tensor, with what locates their rows.
struct LayoutGuess {
    RowLayout layout = RowLayout::Same;
    std::vector<size_t> parts;  // base tensor indices, in the rule's `to` order
    int64_t head_count = 0;     // RopePermute, QkvPerHead: the head count
    std::string heads_key;      // RopePermute, QkvPerHead: the config.json key that gives it
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

// The most elements of one row map compares: a row holding more (a grouped expert tensor
// compared whole, one expert's matrix a row: 16.6M elements in GPT-OSS-120B) is compared on a
// sample of them, so that what one row read holds stays bounded (as doubles: 512 KiB).
inline constexpr int64_t kRowElements = int64_t{1} << 16;

// A box of one row (its axes past the first): elements compared, contiguous in row-major order.
struct RowSpan {
    Shape start;
    Shape extent;
};

// The elements of a row of a tensor of `shape` that map compares: the whole row when it holds
// at most kRowElements elements, else lines of its last axis spread evenly over the other axes
// (sample_rows), each its first min(last axis, kRowElements) elements, kRowElements elements in
// all at most. Pure: the same spans on every rank, and on both sides of a comparison (their rows
// have the same shape).
std::vector<RowSpan> compared_spans(const Shape& shape);

// Where `span` begins in a row of a tensor of `shape`, in elements from the row's first.
int64_t row_offset(const Shape& shape, const RowSpan& span);

// The rows of a tensor (its first axis; 1 for a scalar) and the elements of one row.
int64_t tensor_rows(const Shape& shape);
int64_t row_length(const Shape& shape);

const char* layout_name(RowLayout layout);

}  // namespace vmerge
