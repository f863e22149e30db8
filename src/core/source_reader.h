#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace vmerge {

// Where the copy executor's source bytes come from. A StorageRef's `file` names one source;
// by default it is a file read with pread (InputFile). Other sources, such as the datasets of
// an HDF5 archive being converted back, are supplied by the backend that reads them
// (Backend::source_opener), so the executor knows no file format.
class SourceReader {
public:
    virtual ~SourceReader() = default;
    // Exactly `length` bytes at `offset` of the source into `out`; Error when it cannot.
    virtual void read_exact(uint64_t offset, void* out, uint64_t length, const char* what) const = 0;
    // The bytes from `offset` on into `count` places in memory, in order; `pieces` is consumed.
    virtual void read_scattered(uint64_t offset, iovec* pieces, size_t count, const char* what) const {
        for (size_t i = 0; i < count; ++i) {
            read_exact(offset, pieces[i].iov_base, pieces[i].iov_len, what);
            offset += pieces[i].iov_len;
        }
    }
    // These bytes will be read soon (a hint: a file starts reading them from disk).
    virtual void will_need(uint64_t /*offset*/, uint64_t /*length*/) const {}
    // These bytes will not be read again (a hint; nothing to do for most sources).
    virtual void drop_cache(uint64_t /*offset*/, uint64_t /*length*/) const {}
    // The most bytes the executor should ask for in one contiguous read; 0: its own default (a
    // piece that stays in the CPU cache for its checksum). An object in a store asks for more:
    // each read is a request with a round trip, so fewer, larger ones.
    virtual uint64_t read_piece_bytes() const { return 0; }
};

// Opens the source a StorageRef's `file` names.
using SourceOpener = std::function<std::unique_ptr<SourceReader>(const std::string& file)>;

}  // namespace vmerge
