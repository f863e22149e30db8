#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace vmerge {

// What one rank hands the archive's writer for one piece of its work (docs/hdf5.md, "Writing in
// parallel"): records of whole compressed chunks (zstd frames, stored as they are with
// H5Dwrite_chunk) and of raw rows of unchunked datasets. Pure bytes, no HDF5 or MPI, so the
// same parcel is written locally or sent to another rank unchanged.
class ChunkParcel {
public:
    enum class Kind : uint64_t { Frame = 1, Rows = 2 };
    struct Record {
        Kind kind;
        size_t tensor;
        int64_t row_begin, row_end;  // a frame: the rows of its chunk inside the tensor
        const unsigned char* data;
        size_t size;
    };

    void add(Kind kind, size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size);
    bool empty() const { return bytes_.empty(); }
    void clear() { bytes_.clear(); }
    // The encoded parcel (to send), and its storage (to receive into, or to take back a buffer).
    std::vector<unsigned char>& bytes() { return bytes_; }

    // The records of an encoded parcel, pointing into `bytes`. Throws Error for a truncated one.
    static std::vector<Record> records(const std::vector<unsigned char>& bytes);

private:
    std::vector<unsigned char> bytes_;
};

}  // namespace vmerge
