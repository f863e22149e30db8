#include "formats/deepspeed/flat_partition.h"

#include <algorithm>
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

int64_t ceil_div(int64_t n, int64_t d) { return (n + d - 1) / d; }

// a + b, or Error when the sum of a group's sizes leaves 64 bits (a hostile param_shapes).
int64_t sum_within(int64_t a, int64_t b, const std::string& where) {
    int64_t sum = 0;
    if (__builtin_add_overflow(a, b, &sum)) throw Error(where + ": its sizes add up past 64 bits");
    return sum;
}

// DeepSpeed's parameter_alignment (stage_1_and_2.py): after each parameter but the last, the
// padding that takes the running offset to a multiple of 16 / element size (1, 2, 4, 8 or 16
// elements; 1 when the option is off). Every entry follows from the shapes once that
// alignment is known, so the list must be what one of them gives: an entry one larger shifts
// every later parameter.
void check_alignment_paddings(const std::vector<FlatParam>& params, const std::vector<int64_t>& paddings,
                              const std::string& file, const std::string& group) {
    if (paddings.empty()) return;
    if (paddings.size() != params.size())
        throw Error(file + ": " + group + ": param_alignment_paddings has " + std::to_string(paddings.size()) +
                    " entries but param_shapes has " + std::to_string(params.size()) + " parameters");
    for (const int64_t alignment : {1, 2, 4, 8, 16}) {
        bool fits = true;  // every parameter starts aligned, so its padding follows from its own size
        for (size_t i = 0; i < params.size() && fits; ++i) {
            const int64_t expected = i + 1 == params.size() ? 0 : (alignment - numel_of(params[i]) % alignment) % alignment;
            fits = paddings[i] == expected;
        }
        if (fits) return;
    }
    std::string listed;
    for (size_t i = 0; i < paddings.size() && i < 8; ++i) listed += (i ? ", " : "") + std::to_string(paddings[i]);
    if (paddings.size() > 8) listed += ", ...";
    throw Error(file + ": " + group + ": param_alignment_paddings [" + listed +
                "] is not the padding that aligns each parameter's end to 1, 2, 4, 8 or 16 elements (none after the "
                "last parameter)");
}

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

Zero2Layout zero2_layout(int64_t group_elements, size_t world) {
    Zero2Layout layout;
    layout.group_elements = group_elements;
    if (world == 0) return layout;
    // DeepSpeed pads the flat group to a multiple of nccl_start_alignment_factor (2) · W, so
    // every partition has the same, even, length.
    const int64_t w = static_cast<int64_t>(world);
    layout.partition = ceil_div(group_elements, 2 * w) * 2;
    for (int64_t r = 0; r < w; ++r)
        layout.saved.push_back(std::clamp(group_elements - r * layout.partition, int64_t{0}, layout.partition));
    return layout;
}

Zero2Group zero2_group_slices(const std::vector<FlatParam>& params, const std::vector<int64_t>& rank_lengths,
                              const std::vector<std::string>& rank_files, const std::string& group,
                              const std::vector<int64_t>& param_paddings) {
    if (rank_files.size() != rank_lengths.size() || rank_lengths.empty())
        throw Error(group + ": " + std::to_string(rank_lengths.size()) + " partitions for " +
                    std::to_string(rank_files.size()) + " rank files");
    check_alignment_paddings(params, param_paddings, rank_files[0], group);
    auto padding_after = [&](size_t i) { return param_paddings.empty() ? int64_t{0} : param_paddings[i]; };
    int64_t group_elements = 0;
    for (size_t i = 0; i < params.size(); ++i) group_elements = sum_within(group_elements, numel_of(params[i]) + padding_after(i), group);
    Zero2Group out;
    out.layout = zero2_layout(group_elements, rank_lengths.size());
    const Zero2Layout& layout = out.layout;
    for (size_t r = 0; r < rank_lengths.size(); ++r)
        if (rank_lengths[r] != layout.saved[r])
            throw Error(rank_files[r] + ": " + group + " holds " + std::to_string(rank_lengths[r]) +
                        " elements, but its param_shapes (" + std::to_string(group_elements) + " elements" +
                        (param_paddings.empty() ? "" : " with param_alignment_paddings") + ", in " +
                        std::to_string(rank_lengths.size()) + " partitions of " + std::to_string(layout.partition) +
                        ") give rank " + std::to_string(r) + " exactly " + std::to_string(layout.saved[r]));
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
        out.params.push_back(slices_of_concatenation(rank_lengths, offset, offset + numel_of(params[i]), 0));
        offset += numel_of(params[i]) + padding_after(i);
    }
    return out;
}

Zero3Slices zero3_slices(const std::vector<std::vector<FlatParam>>& groups,
                         const std::vector<std::vector<int64_t>>& flat_lengths, const std::vector<std::string>& rank_files) {
    const int64_t world = static_cast<int64_t>(flat_lengths.size());
    if (rank_files.size() != flat_lengths.size() || world == 0)
        throw Error("ZeRO-3 flat groups of " + std::to_string(flat_lengths.size()) + " ranks for " +
                    std::to_string(rank_files.size()) + " rank files");
    // The flat length every rank must hold per sub-group: the sum of its parameters' pieces.
    std::vector<int64_t> pieces;
    for (size_t g = 0; g < groups.size(); ++g) {
        int64_t sum = 0;
        for (const auto& p : groups[g]) sum = sum_within(sum, ceil_div(numel_of(p), world), "sub-group " + std::to_string(g));
        pieces.push_back(sum);
    }
    for (int64_t r = 0; r < world; ++r) {
        const auto& lengths = flat_lengths[r];
        if (lengths.size() != groups.size())
            throw Error(rank_files[r] + ": " + std::to_string(lengths.size()) + " fp32_flat_groups, but param_shapes has " +
                        std::to_string(groups.size()) + " sub-groups");
        for (size_t g = 0; g < groups.size(); ++g)
            if (lengths[g] != pieces[g])
                throw Error(rank_files[r] + ": fp32_flat_groups." + std::to_string(g) + " holds " + std::to_string(lengths[g]) +
                            " elements, but its " + std::to_string(groups[g].size()) + " parameters cut into " +
                            std::to_string(world) + " ranks (ceil(numel/" + std::to_string(world) +
                            ") each) need exactly " + std::to_string(pieces[g]));
    }
    Zero3Slices out;
    std::vector<char> read(static_cast<size_t>(world) * groups.size(), 0);
    for (size_t g = 0; g < groups.size(); ++g) {
        int64_t offset = 0;  // of each parameter's piece in its sub-group's flat, on every rank
        for (const auto& p : groups[g]) {
            const int64_t n = numel_of(p), ps = ceil_div(n, world);
            std::vector<FlatSlice> slices;
            for (int64_t r = 0; r * ps < n; ++r) {  // the later ranks hold padding only
                const size_t flat = static_cast<size_t>(r) * groups.size() + g;
                slices.push_back({flat, offset, r * ps, std::min(ps, n - r * ps)});
                read[flat] = 1;
            }
            out.params.push_back(std::move(slices));
            offset += ps;
        }
    }
    for (size_t flat = 0; flat < read.size(); ++flat) {
        const size_t r = flat / groups.size(), g = flat % groups.size();
        if (!read[flat] && flat_lengths[r][g] > 0) out.padding_only.push_back(flat);
    }
    return out;
}

std::vector<FlatSlice> fragment_slices(const std::vector<int64_t>& fragment_lengths, int64_t numel,
                                       const std::vector<std::string>& rank_files, const std::string& name) {
    const int64_t world = static_cast<int64_t>(fragment_lengths.size());
    if (rank_files.size() != fragment_lengths.size() || world == 0)
        throw Error("frozen parameter '" + name + "': " + std::to_string(fragment_lengths.size()) + " fragments for " +
                    std::to_string(rank_files.size()) + " rank files");
    const int64_t piece = ceil_div(numel, world);
    for (int64_t r = 0; r < world; ++r)
        if (fragment_lengths[r] != piece)
            throw Error(rank_files[r] + ": frozen_param_fragments '" + name + "' holds " +
                        std::to_string(fragment_lengths[r]) + " elements, but the parameter's " + std::to_string(numel) +
                        " elements cut into " + std::to_string(world) + (world == 1 ? " rank" : " ranks") +
                        " need exactly " + std::to_string(piece));
    return slices_of_concatenation(fragment_lengths, 0, numel, 0);
}

}  // namespace vmerge
