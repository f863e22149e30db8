#include "output/s3/upload_plan.h"

#include <algorithm>

#include "core/error.h"

namespace vmerge {
namespace {

// Each file's spans (rank, byte range) in offset order, adjacent spans of one rank joined.
std::vector<std::vector<ShareSpan>> spans_by_file(const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                                                  const std::vector<std::vector<WriteTask>>& work) {
    std::vector<std::vector<ShareSpan>> spans(layout.files.size());
    for (size_t rank = 0; rank < work.size(); ++rank)
        for (const WriteTask& task : work[rank]) {
            const TensorLocation& where = layout.locations.at(task.tensor);
            const uint64_t row = row_bytes(tensors.at(task.tensor));
            const uint64_t begin = where.offset + static_cast<uint64_t>(task.row_begin) * row;
            const uint64_t end = where.offset + static_cast<uint64_t>(task.row_end) * row;
            if (end > begin) spans[where.file].push_back({static_cast<int>(rank), begin, end});
        }
    for (auto& file : spans) {
        std::sort(file.begin(), file.end(), [](const ShareSpan& a, const ShareSpan& b) { return a.begin < b.begin; });
        std::vector<ShareSpan> joined;
        for (const ShareSpan& s : file) {
            if (!joined.empty() && joined.back().rank == s.rank && joined.back().end == s.begin) joined.back().end = s.end;
            else joined.push_back(s);
        }
        file = std::move(joined);
    }
    return spans;
}

// The file's spans must follow its header without gap or overlap up to its end.
void check_coverage(const OutputFile& file, const std::vector<ShareSpan>& spans) {
    uint64_t next = file.header.size();
    for (const ShareSpan& s : spans) {
        if (s.begin != next)
            throw Error(file.name + ": the planned writes leave bytes " + std::to_string(std::min(next, s.begin)) + ".." +
                        std::to_string(std::max(next, s.begin)) + " uncovered or written twice; cannot cut it into upload parts");
        next = s.end;
    }
    if (next != file.size)
        throw Error(file.name + ": the planned writes end at byte " + std::to_string(next) + " of " +
                    std::to_string(file.size) + "; cannot cut it into upload parts");
}

uint64_t file_part_size(uint64_t file_size, uint64_t part_size) {
    const uint64_t fewest = (file_size + kMaxUploadParts - 1) / kMaxUploadParts;
    if (fewest <= part_size) return part_size;
    return (fewest + (1ull << 20) - 1) / (1ull << 20) * (1ull << 20);  // whole MiB
}

}  // namespace

UploadPlan plan_uploads(const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                        const std::vector<std::vector<WriteTask>>& work, uint64_t part_size) {
    if (part_size == 0) throw Error("the upload part size must be positive");
    const auto spans = spans_by_file(tensors, layout, work);
    UploadPlan plan;
    for (size_t f = 0; f < layout.files.size(); ++f) {
        const OutputFile& file = layout.files[f];
        check_coverage(file, spans[f]);
        const uint64_t p = file_part_size(file.size, part_size);
        plan.part_size.push_back(p);
        std::vector<PlannedPart> parts;
        size_t s = 0;  // the first span that may reach into the part
        for (uint64_t offset = 0; offset < file.size; offset += p) {
            PlannedPart part{f, static_cast<int>(parts.size()) + 1, offset, std::min(p, file.size - offset), 0, {}};
            const uint64_t first_data = std::max<uint64_t>(offset, file.header.size());
            while (s < spans[f].size() && spans[f][s].end <= first_data) ++s;
            part.owner = s < spans[f].size() ? spans[f][s].rank : 0;  // a file of a header alone: rank 0
            for (size_t i = s; i < spans[f].size() && spans[f][i].begin < part.offset + part.length; ++i) {
                const ShareSpan& span = spans[f][i];
                if (span.rank == part.owner) continue;
                part.pieces.push_back({span.rank, std::max(span.begin, part.offset),
                                       std::min(span.end, part.offset + part.length)});
            }
            parts.push_back(std::move(part));
        }
        plan.parts.push_back(std::move(parts));
    }
    return plan;
}

const PlannedPart& part_at(const UploadPlan& plan, size_t file, uint64_t offset) {
    return plan.parts.at(file).at(offset / plan.part_size.at(file));
}

}  // namespace vmerge
