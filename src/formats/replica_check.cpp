#include "formats/replica_check.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/human_units.h"
#include "io/input_file.h"

namespace vmerge {
namespace {

// The bytes of its storage the view can touch: [first, first + length).
std::pair<uint64_t, uint64_t> view_span(const TensorRef& t) {
    const uint64_t element = element_size(t.dtype);
    int64_t last = t.storage_offset;
    for (size_t d = 0; d < t.shape.size(); ++d)
        if (t.shape[d] == 0) return {t.storage.byte_offset, 0};
        else last += (t.shape[d] - 1) * (d < t.stride.size() ? t.stride[d] : 0);
    return {t.storage.byte_offset + static_cast<uint64_t>(t.storage_offset) * element,
            static_cast<uint64_t>(last - t.storage_offset + 1) * element};
}

bool covers_record(const TensorRef& t) {
    return view_span(t) == std::make_pair(t.storage.byte_offset, t.storage.byte_size);
}

bool same_view_bytes(const TensorRef& a, const TensorRef& b) {
    const auto [at_a, length] = view_span(a);
    return same_bytes(InputFile(a.storage.file), at_a, InputFile(b.storage.file), view_span(b).first, length);
}

std::string where(const TensorRef& t) { return t.storage.file + " (" + t.storage.key + ")"; }

}  // namespace

std::string check_replicas_agree(const std::vector<ReplicaPair>& replicas, uint64_t read_budget) {
    uint64_t read = 0, unread = 0;
    size_t unread_count = 0;
    for (const ReplicaPair& r : replicas) {
        const TensorRef &a = r.kept, &b = r.dropped;
        if (a.dtype != b.dtype || a.shape != b.shape || a.stride != b.stride || a.storage_offset != b.storage_offset)
            throw Error("'" + r.name + "': " + where(b) + " holds it as " + std::string(torch_name(b.dtype)) + " " + shape_to_string(b.shape) +
                        ", " + where(a) + " as " + std::string(torch_name(a.dtype)) + " " + shape_to_string(a.shape) +
                        ": two different sources for one output tensor");
        // Equal records hold equal views; unequal ones differ in the view unless it leaves part
        // of its record out (padding), where only the views' bytes can tell.
        const bool crcs = a.storage.crc32 && b.storage.crc32 && a.storage.byte_size == b.storage.byte_size;
        if (crcs && *a.storage.crc32 == *b.storage.crc32) continue;
        if (!crcs || !covers_record(a) || !covers_record(b)) {
            const uint64_t length = view_span(a).second;
            if (read + length > read_budget) {
                unread += length;
                ++unread_count;
                continue;
            }
            read += length;
            if (same_view_bytes(a, b)) continue;
        }
        throw Error("'" + r.name + "': " + where(b) + " and " + where(a) +
                    " hold different values for it (each should be a copy of the other): two different sources for "
                    "one output tensor; the save is inconsistent, merge a complete one");
    }
    if (unread_count == 0) return "";
    return std::to_string(unread_count) + " replica copies (" + human_bytes(static_cast<double>(unread)) +
           ") not compared with the copy written: their records differ outside the tensor (padding) and comparing "
           "the tensors would read more than " + human_bytes(static_cast<double>(read_budget));
}

}  // namespace vmerge
