#include "torch/dtensor_placement.h"

#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {
namespace {

using Runs = std::vector<DimRun>;

// Positions [start, start+length) of a run sequence, as a new sequence.
Runs take_positions(const Runs& runs, int64_t start, int64_t length) {
    Runs out;
    int64_t position = 0;
    const int64_t end = start + length;
    for (const DimRun& run : runs) {
        const int64_t run_end = position + run.length;
        const int64_t lo = std::max(position, start);
        const int64_t hi = std::min(run_end, end);
        if (lo < hi) out.push_back({0, run.global + (lo - position), hi - lo});
        position = run_end;
    }
    return out;
}

int64_t total_length(const Runs& runs) {
    int64_t n = 0;
    for (const DimRun& r : runs) n += r.length;
    return n;
}

}  // namespace

std::pair<int64_t, int64_t> chunk_range(int64_t size, int64_t count, int64_t index) {
    const int64_t chunk = count > 0 ? (size + count - 1) / count : 0;
    const int64_t begin = std::min(size, index * chunk);
    const int64_t end = std::min(size, (index + 1) * chunk);
    return {begin, end - begin};
}

void check_dtensor_layout(const DTensorLayout& layout, const std::string& where) {
    int64_t ranks = 1;
    for (int64_t size : layout.mesh_shape) {
        if (size < 1 || size > kMaxWorldSize / ranks)
            throw Error(where + ": DTensor mesh " + shape_to_string(layout.mesh_shape) + ": expected dims of 1 or more, " +
                        std::to_string(kMaxWorldSize) + " ranks at most in all");
        ranks *= size;
    }
    int64_t splits = 1;
    for (const Placement& p : layout.placements) {
        if (p.kind != Placement::Kind::StridedShard) continue;
        require_within(p.split_factor, 1, kMaxWorldSize / splits,
                       where + ": placement _StridedShard(dim=" + std::to_string(p.dim) + ")" +
                           (splits > 1 ? " after other split factors " + std::to_string(splits) : "") + ": split factor");
        splits *= p.split_factor;
    }
}

std::vector<std::vector<DimRun>> dtensor_runs(const DTensorLayout& layout,
                                              const std::string& where) {
    check_dtensor_layout(layout, where);
    std::vector<Runs> dims;
    for (int64_t size : layout.global_shape) dims.push_back(Runs{{0, 0, size}});
    for (size_t m = 0; m < layout.placements.size(); ++m) {
        const Placement& p = layout.placements[m];
        const int64_t ranks = layout.mesh_shape[m];
        const int64_t coord = layout.coordinates[m];
        if (coord < 0 || coord >= ranks)
            throw Error(where + ": mesh coordinate " + std::to_string(coord) + " outside a mesh dim of " +
                        std::to_string(ranks));
        if (p.kind == Placement::Kind::Replicate) continue;
        if (p.kind == Placement::Kind::Partial)
            throw Error(where + ": placement " + placement_to_string(p) +
                        " holds a partial sum, not a shard; vmerge cannot merge it (save the "
                        "checkpoint after the reduction, or redistribute to Shard/Replicate)");
        if (p.dim < 0 || p.dim >= static_cast<int64_t>(dims.size()))
            throw Error(where + ": placement " + placement_to_string(p) + " on a " +
                        std::to_string(dims.size()) + "-d tensor");
        Runs& runs = dims[p.dim];
        const int64_t length = total_length(runs);
        if (p.kind == Placement::Kind::Shard) {
            auto [start, len] = chunk_range(length, ranks, coord);
            runs = take_positions(runs, start, len);
        } else {
            // torch's _StridedShard split (placement_types.py, torch >= 2.8): chunk into
            // split_factor pieces, chunk each piece into `ranks`, and give this rank its chunk
            // of every piece. Older torch chunked into ranks*split_factor pieces, which agrees
            // for the even sizes it accepted.
            Runs gathered;
            for (int64_t k = 0; k < p.split_factor; ++k) {
                auto [piece_start, piece_len] = chunk_range(length, p.split_factor, k);
                auto [start, len] = chunk_range(piece_len, ranks, coord);
                for (const DimRun& r : take_positions(runs, piece_start + start, len)) gathered.push_back(r);
            }
            runs = std::move(gathered);
        }
    }
    for (Runs& runs : dims) {
        Runs merged;
        for (const DimRun& r : runs) {
            if (!merged.empty() && merged.back().global + merged.back().length == r.global)
                merged.back().length += r.length;
            else if (r.length > 0)
                merged.push_back(r);
        }
        int64_t local = 0;
        for (DimRun& r : merged) {
            r.local = local;
            local += r.length;
        }
        runs = std::move(merged);
    }
    return dims;
}

Shape shard_position(const DTensorLayout& layout) {
    Shape position = layout.coordinates;
    for (size_t m = 0; m < layout.placements.size() && m < position.size(); ++m)
        if (layout.placements[m].kind == Placement::Kind::Replicate) position[m] = 0;
    return position;
}

}  // namespace vmerge
