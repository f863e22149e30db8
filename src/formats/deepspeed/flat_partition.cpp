#include "formats/deepspeed/flat_partition.h"

#include <numeric>

#include "core/error.h"

namespace vmerge {
namespace {

int64_t product_from(const Shape& shape, size_t dim) {
    int64_t n = 1;
    for (size_t i = dim; i < shape.size(); ++i) n *= shape[i];
    return n;
}

// Elements [begin, end) of the sub-tensor at dimensions >= dim whose leading indices are
// `prefix` (begin/end counted inside that sub-tensor).
void boxes_from(const Shape& shape, size_t dim, Shape& prefix, int64_t begin, int64_t end,
                std::vector<IndexBox>& out) {
    if (begin >= end) return;
    const int64_t inner = product_from(shape, dim + 1);
    auto push_rows = [&](int64_t row_begin, int64_t row_end) {
        IndexBox box;
        box.start = prefix;
        box.start.push_back(row_begin);
        box.extent.assign(prefix.size(), 1);
        box.extent.push_back(row_end - row_begin);
        for (size_t d = dim + 1; d < shape.size(); ++d) {
            box.start.push_back(0);
            box.extent.push_back(shape[d]);
        }
        out.push_back(std::move(box));
    };
    auto recurse_row = [&](int64_t row, int64_t b, int64_t e) {
        prefix.push_back(row);
        boxes_from(shape, dim + 1, prefix, b, e, out);
        prefix.pop_back();
    };
    const int64_t first_row = begin / inner, last_row = (end - 1) / inner;
    if (begin % inner == 0 && end % inner == 0) return push_rows(first_row, end / inner);
    if (first_row == last_row) return recurse_row(first_row, begin - first_row * inner, end - first_row * inner);
    int64_t full_begin = first_row;
    if (begin % inner != 0) {
        recurse_row(first_row, begin % inner, inner);
        full_begin = first_row + 1;
    }
    const int64_t full_end = end / inner;
    if (full_begin < full_end) push_rows(full_begin, full_end);
    if (end % inner != 0) recurse_row(full_end, 0, end % inner);
}

int64_t numel_of(const FlatParam& p) { return numel(p.shape); }

}  // namespace

std::vector<IndexBox> flat_range_boxes(const Shape& shape, int64_t begin, int64_t end) {
    std::vector<IndexBox> out;
    if (begin >= end) return out;
    if (shape.empty()) return {IndexBox{}};  // a scalar: its one element
    Shape prefix;
    boxes_from(shape, 0, prefix, begin, end, out);
    return out;
}

std::vector<FlatSlice> slices_of_concatenation(const std::vector<int64_t>& lengths, int64_t begin, int64_t end,
                                               int64_t param_base, size_t first_flat) {
    std::vector<FlatSlice> out;
    int64_t flat_start = 0;
    for (size_t f = 0; f < lengths.size() && begin < end; ++f) {
        const int64_t flat_end = flat_start + lengths[f];
        if (begin < flat_end) {
            const int64_t stop = std::min(end, flat_end);
            out.push_back({first_flat + f, begin - flat_start, param_base, stop - begin});
            param_base += stop - begin;
            begin = stop;
        }
        flat_start = flat_end;
    }
    if (begin < end) throw Error("flat range past the end of the flat tensors");
    return out;
}

std::vector<std::vector<FlatSlice>> zero2_group_slices(const std::vector<FlatParam>& params,
                                                       const std::vector<int64_t>& rank_lengths, const std::string& where,
                                                       const std::vector<int64_t>& param_paddings) {
    if (!param_paddings.empty() && param_paddings.size() != params.size())
        throw Error(where + ": param_alignment_paddings has " + std::to_string(param_paddings.size()) +
                    " entries but param_shapes has " + std::to_string(params.size()) + " parameters");
    auto padding_after = [&](size_t i) { return param_paddings.empty() ? int64_t{0} : param_paddings[i]; };
    const int64_t available = std::accumulate(rank_lengths.begin(), rank_lengths.end(), int64_t{0});
    int64_t consumed = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        if (padding_after(i) < 0) throw Error(where + ": a negative param_alignment_paddings entry");
        consumed += numel_of(params[i]) + padding_after(i);
    }
    // Both counts may differ by DeepSpeed's alignment of the group to 2·W elements only.
    const int64_t align = 2 * static_cast<int64_t>(rank_lengths.size());
    auto aligned = [&](int64_t n) { return (n + align - 1) / align * align; };
    if (consumed > available || aligned(consumed) != aligned(available))
        throw Error(where + ": param_shapes need " + std::to_string(consumed) + " elements but the " +
                    std::to_string(rank_lengths.size()) + " ranks' fp32 partitions hold " + std::to_string(available));
    std::vector<std::vector<FlatSlice>> out;
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        out.push_back(slices_of_concatenation(rank_lengths, offset, offset + numel_of(params[i]), 0));
        offset += numel_of(params[i]) + padding_after(i);
    }
    return out;
}

std::vector<std::vector<FlatSlice>> zero3_slices(const std::vector<FlatParam>& params,
                                                 const std::vector<std::vector<int64_t>>& flat_lengths,
                                                 const std::string& where) {
    const int64_t world = static_cast<int64_t>(flat_lengths.size());
    const size_t per_rank = flat_lengths.empty() ? 0 : flat_lengths[0].size();
    int64_t pieces = 0;
    for (const auto& p : params) pieces += (numel_of(p) + world - 1) / world;
    for (int64_t r = 0; r < world; ++r) {
        const auto& lengths = flat_lengths[r];
        const int64_t held = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
        if (lengths.size() != per_rank || held != pieces)
            throw Error(where + ": rank " + std::to_string(r) + " holds " + std::to_string(lengths.size()) +
                        " fp32 flat groups of " + std::to_string(held) + " elements, but param_shapes cut into " +
                        std::to_string(world) + " ranks need " + std::to_string(per_rank) + " groups of " +
                        std::to_string(pieces) + " elements on every rank");
    }
    std::vector<std::vector<FlatSlice>> out;
    int64_t offset = 0;
    for (const auto& p : params) {
        const int64_t n = numel_of(p), ps = (n + world - 1) / world;
        std::vector<FlatSlice> slices;
        for (int64_t r = 0; r < world; ++r) {
            const int64_t length = std::min(ps, n - r * ps);
            if (length <= 0) break;  // this rank and the later ones hold padding only
            for (auto& s : slices_of_concatenation(flat_lengths[r], offset, offset + length, r * ps, r * per_rank))
                slices.push_back(s);
        }
        out.push_back(std::move(slices));
        offset += ps;
    }
    return out;
}

std::vector<FlatSlice> fragment_slices(const std::vector<int64_t>& fragment_lengths, int64_t numel,
                                       const std::string& where) {
    const int64_t held = std::accumulate(fragment_lengths.begin(), fragment_lengths.end(), int64_t{0});
    if (held < numel)
        throw Error(where + ": its fragments hold " + std::to_string(held) + " elements, the parameter has " +
                    std::to_string(numel));
    return slices_of_concatenation(fragment_lengths, 0, numel, 0);
}

}  // namespace vmerge
