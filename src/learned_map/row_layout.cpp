#include "learned_map/row_layout.h"

#include <algorithm>

namespace vmerge {

int64_t source_row_of(const LayoutGuess& guess, const ModelShape& heads, const std::vector<int64_t>& part_rows,
                      size_t part, int64_t row) {
    switch (guess.layout) {
        case RowLayout::Same:
        case RowLayout::Vocab:
            return row;
        case RowLayout::RopePermute: {
            // HF row h·d + j·d/2 + p holds checkpoint row h·d + 2p + j (head h of d rows).
            const int64_t d = part_rows[0] / guess.head_count, half = d / 2;
            const int64_t h = row / d, within = row % d, j = within / half, p = within % half;
            return h * d + 2 * p + j;
        }
        case RowLayout::Qkv: {
            // Per query group g: [its heads/groups q heads; one k head; one v head], d rows each.
            const int64_t d = heads.head_dim, per_group = heads.heads / heads.kv_heads;
            const int64_t group_rows = (per_group + 2) * d;
            if (part == 0) return row / (per_group * d) * group_rows + row % (per_group * d);
            const int64_t offset = part == 1 ? per_group * d : (per_group + 1) * d;
            return row / d * group_rows + offset + row % d;
        }
        case RowLayout::GateUp:
            return part == 0 ? row : part_rows[0] + row;
        case RowLayout::PlainQkv:
            return (part > 0 ? part_rows[0] : 0) + (part > 1 ? part_rows[1] : 0) + row;
        case RowLayout::QkvPerHead: {
            // HF row t·n·d + h·d + j (t: 0 q, 1 k, 2 v; head h of n, d rows) is row h·3d + t·d + j.
            const int64_t n = guess.head_count, d = part_rows[0] / (3 * n);
            const int64_t t = row / (n * d), h = row % (n * d) / d, j = row % d;
            return h * 3 * d + t * d + j;
        }
    }
    return row;
}

std::vector<int64_t> sample_rows(int64_t rows, int64_t count) {
    std::vector<int64_t> picked;
    if (rows <= 0) return picked;
    count = std::clamp<int64_t>(count, 1, rows);
    for (int64_t i = 0; i < count; ++i) {
        // Evenly spread, first and last included; integer arithmetic so every rank agrees.
        const int64_t row = count == 1 ? 0 : i * (rows - 1) / (count - 1);
        if (picked.empty() || picked.back() != row) picked.push_back(row);
    }
    return picked;
}

int64_t sample_count(int64_t row_length) {
    constexpr int64_t kElements = 512;
    return std::clamp<int64_t>(kElements / std::max<int64_t>(row_length, 1), 8, 64);
}

std::vector<RowSpan> compared_spans(const Shape& shape) {
    const Shape row_shape(shape.empty() ? shape.begin() : shape.begin() + 1, shape.end());
    const int64_t length = row_length(shape);
    if (row_shape.empty() || length <= kRowElements) return {{Shape(row_shape.size(), 0), row_shape}};
    const int64_t last = row_shape.back(), width = std::min(last, kRowElements);
    std::vector<RowSpan> spans;
    for (int64_t line : sample_rows(length / last, std::max<int64_t>(1, kRowElements / width))) {
        RowSpan span{Shape(row_shape.size(), 0), Shape(row_shape.size(), 1)};
        span.extent.back() = width;
        for (size_t axis = row_shape.size() - 1; axis-- > 0;) {  // the line's index on each other axis
            span.start[axis] = line % row_shape[axis];
            line /= row_shape[axis];
        }
        spans.push_back(std::move(span));
    }
    return spans;
}

int64_t row_offset(const Shape& shape, const RowSpan& span) {
    int64_t offset = 0;
    for (size_t axis = 0; axis < span.start.size(); ++axis) offset = offset * shape[axis + 1] + span.start[axis];
    return offset;
}

int64_t tensor_rows(const Shape& shape) { return shape.empty() ? 1 : shape[0]; }

int64_t row_length(const Shape& shape) {
    int64_t n = 1;
    for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
}

const char* layout_name(RowLayout layout) {
    switch (layout) {
        case RowLayout::Same: return "same rows";
        case RowLayout::Vocab: return "vocabulary rows (padding after)";
        case RowLayout::RopePermute: return "rope_permute";
        case RowLayout::Qkv: return "fused qkv grouped per query group";
        case RowLayout::GateUp: return "fused [gate; up]";
        case RowLayout::QkvPerHead: return "fused qkv grouped per head";
        case RowLayout::PlainQkv: return "fused [Q; K; V], not grouped";
    }
    return "?";
}

}  // namespace vmerge
