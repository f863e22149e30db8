#include "output/hdf5/chunk_parcel.h"

#include <cstring>
#include <string>

#include "core/error.h"

namespace vmerge {
namespace {

// kind, tensor, row_begin, row_end, size: five 8-byte words (in this machine's order: a parcel
// never leaves the job).
constexpr size_t kHeaderWords = 5;
constexpr size_t kHeaderBytes = kHeaderWords * sizeof(uint64_t);

}  // namespace

void ChunkParcel::add(Kind kind, size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data,
                      size_t size) {
    const uint64_t header[kHeaderWords] = {static_cast<uint64_t>(kind), tensor, static_cast<uint64_t>(row_begin),
                                           static_cast<uint64_t>(row_end), size};
    const size_t at = bytes_.size();
    bytes_.resize(at + kHeaderBytes + size);
    std::memcpy(bytes_.data() + at, header, kHeaderBytes);
    if (size) std::memcpy(bytes_.data() + at + kHeaderBytes, data, size);
}

std::vector<ChunkParcel::Record> ChunkParcel::records(const std::vector<unsigned char>& bytes) {
    std::vector<Record> out;
    for (size_t at = 0; at < bytes.size();) {
        uint64_t header[kHeaderWords];
        if (bytes.size() - at < kHeaderBytes)
            throw Error("internal: a chunk parcel of " + std::to_string(bytes.size()) + " bytes ends inside a header");
        std::memcpy(header, bytes.data() + at, kHeaderBytes);
        at += kHeaderBytes;
        const Kind kind = static_cast<Kind>(header[0]);
        if ((kind != Kind::Frame && kind != Kind::Rows) || header[4] > bytes.size() - at)
            throw Error("internal: a chunk parcel of " + std::to_string(bytes.size()) + " bytes is damaged at byte " +
                        std::to_string(at - kHeaderBytes));
        out.push_back({kind, static_cast<size_t>(header[1]), static_cast<int64_t>(header[2]),
                       static_cast<int64_t>(header[3]), bytes.data() + at, static_cast<size_t>(header[4])});
        at += header[4];
    }
    return out;
}

}  // namespace vmerge
