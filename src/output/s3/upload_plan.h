#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor_mapping.h"
#include "plan/output_layout.h"
#include "plan/rank_work.h"

namespace vmerge {

// How the weight files of a merge into a bucket are cut into multipart-upload parts, and which
// rank sends each part. Pure: every rank plans the same parts from the same layout and work.
//
// Parts lie on a fixed grid of each file's bytes, [k*P, (k+1)*P) (the last one shorter), so that
// every part but the last is at least the store's 5 MiB minimum whatever the rank shares are;
// the shares (plan_rank_work: contiguous byte ranges, cut between rows) do not fall on the grid.
// A part belongs to the rank whose share holds its first data byte (part 1 holds the file's
// header, which every rank knows, and belongs to the rank of the first tensor byte). Another
// rank whose share reaches into that part sends its piece (under P bytes: at most one piece at
// each end of its share in each file) to the owner after the copy, which then sends the part.
// So each byte goes to the store once, and at most one part per share boundary waits.

// Bytes of file `file` in [begin, end) that rank `rank` writes.
struct ShareSpan {
    int rank = 0;
    uint64_t begin = 0;
    uint64_t end = 0;
};

struct PlannedPart {
    size_t file = 0;
    int number = 1;       // 1-based, as S3 numbers parts
    uint64_t offset = 0;  // in the file
    uint64_t length = 0;
    int owner = 0;                   // the rank that uploads it
    std::vector<ShareSpan> pieces;   // the other ranks' bytes in it, each sent to the owner
};

struct UploadPlan {
    std::vector<uint64_t> part_size;                // by file: P (raised so that no file needs over 10000 parts)
    std::vector<std::vector<PlannedPart>> parts;    // by file, in order
};

// The most parts S3 takes in one upload, and the smallest part but the last.
constexpr int kMaxUploadParts = 10000;
constexpr uint64_t kMinUploadPartBytes = 5ull << 20;

// Error when the shares and headers do not cover each file exactly (a layout with gaps).
UploadPlan plan_uploads(const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                        const std::vector<std::vector<WriteTask>>& work, uint64_t part_size);

// The part of `plan` that holds byte `offset` of `file`.
const PlannedPart& part_at(const UploadPlan& plan, size_t file, uint64_t offset);

}  // namespace vmerge
