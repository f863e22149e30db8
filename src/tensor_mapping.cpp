#include "vmerge/tensor_mapping.h"

#include <algorithm>

#include "vmerge/error.h"

namespace vmerge {

void check_copies_tile_output(const OutputTensor& t, const std::vector<TensorRef>& sources) {
    const size_t rank = t.shape.size();
    int64_t covered = 0;
    for (const BoxCopy& c : t.copies) {
        if (c.source >= sources.size() || c.src_start.size() != rank ||
            c.dst_start.size() != rank || c.extent.size() != rank)
            throw Error("internal: malformed copy for " + t.name);
        const TensorRef& src = sources[c.source];
        for (size_t d = 0; d < rank; ++d) {
            if (c.extent[d] < 0 || c.dst_start[d] < 0 || c.src_start[d] < 0 ||
                c.dst_start[d] + c.extent[d] > t.shape[d] ||
                c.src_start[d] + c.extent[d] > src.shape[d])
                throw Error(t.name + ": a shard of " + src.storage.file + " maps outside the tensor (dim " +
                            std::to_string(d) + ")");
        }
        covered += numel(c.extent);
    }
    // Boxes are disjoint by construction when their volumes add up and no two overlap;
    // check overlap pairwise only for the few-box case that every rule produces.
    if (covered != numel(t.shape) && !(t.zero_fill && covered < numel(t.shape)))
        throw Error(t.name + ": the shards cover " + std::to_string(covered) + " of " +
                    std::to_string(numel(t.shape)) + " elements of " + shape_to_string(t.shape));
    if (t.copies.size() <= 4096) {
        for (size_t i = 0; i < t.copies.size(); ++i)
            for (size_t j = i + 1; j < t.copies.size(); ++j) {
                bool overlap = numel(t.copies[i].extent) > 0 && numel(t.copies[j].extent) > 0;
                for (size_t d = 0; d < rank && overlap; ++d) {
                    const auto& a = t.copies[i];
                    const auto& b = t.copies[j];
                    overlap = a.dst_start[d] < b.dst_start[d] + b.extent[d] &&
                              b.dst_start[d] < a.dst_start[d] + a.extent[d];
                }
                if (overlap)
                    throw Error(t.name + ": shards from " + sources[t.copies[i].source].storage.file +
                                " and " + sources[t.copies[j].source].storage.file + " overlap");
            }
    }
}

}  // namespace vmerge
