#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "output/s3/upload_plan.h"
#include "plan/output_layout.h"

namespace vmerge {

// One rank's bytes of the upload parts (upload_plan.h) while it copies: the parts it owns,
// assembled in memory and handed to `ready` as soon as every byte is there, and the pieces of
// other ranks' parts its share covers, kept until the exchange after the copy. A part's buffer
// lives from its first byte to its upload, so a rank holds about one part per file it is
// writing plus the parts that wait for a neighbour's piece.
class RankParts {
public:
    using Ready = std::function<void(const PlannedPart& part, std::vector<unsigned char> bytes)>;
    RankParts(const UploadPlan& plan, const OutputLayout& layout, int rank, Ready ready);

    // Hands over the parts that hold only header bytes (a header longer than a part).
    void start();
    // `size` bytes the copy wrote at `offset` of `file` (inside this rank's share).
    void add(size_t file, uint64_t offset, const unsigned char* data, uint64_t size);
    // The pieces for each of `ranks` ranks (index: the owner), for Comm::alltoall.
    std::vector<std::string> outgoing_pieces(int ranks) const;
    // What the other ranks sent (alltoall's answer); Error for a piece this rank does not own.
    void take_pieces(const std::vector<std::string>& incoming);
    // Error naming the first owned part that is not complete (a piece or a block never came).
    void check_complete() const;

private:
    struct Assembly {
        std::vector<unsigned char> bytes;
        uint64_t missing = 0;
        bool sent = false;
    };
    Assembly& owned(const PlannedPart& part);
    void fill(const PlannedPart& part, uint64_t offset, const unsigned char* data, uint64_t size);
    const UploadPlan& plan_;
    const OutputLayout& layout_;
    int rank_;
    Ready ready_;
    std::map<std::pair<size_t, int>, Assembly> owned_;   // (file, part number)
    std::map<std::pair<size_t, int>, Assembly> pieces_;  // this rank's piece of another's part
};

}  // namespace vmerge
