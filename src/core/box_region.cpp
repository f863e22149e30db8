#include "core/box_region.h"

#include <algorithm>

namespace vmerge {

void add_copy(OutputTensor& t, uint32_t source, Shape src_start, Shape dst_start, Shape extent) {
    if (numel(extent) == 0) return;
    t.copies.push_back({source, std::move(src_start), std::move(dst_start), std::move(extent)});
}

void extract_region(const OutputTensor& assembled, const Shape& start, const Shape& extent,
                    const Shape& dst_start, std::vector<BoxCopy>& out) {
    const size_t rank = extent.size();
    for (const BoxCopy& piece : assembled.copies) {
        BoxCopy c;
        c.source = piece.source;
        bool empty = false;
        for (size_t d = 0; d < rank && !empty; ++d) {
            const int64_t lo = std::max(start[d], piece.dst_start[d]);
            const int64_t hi = std::min(start[d] + extent[d], piece.dst_start[d] + piece.extent[d]);
            if (lo >= hi) {
                empty = true;
                break;
            }
            c.src_start.push_back(piece.src_start[d] + (lo - piece.dst_start[d]));
            c.dst_start.push_back(dst_start[d] + (lo - start[d]));
            c.extent.push_back(hi - lo);
        }
        if (!empty) out.push_back(std::move(c));
    }
}

}  // namespace vmerge
