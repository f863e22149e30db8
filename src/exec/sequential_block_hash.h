#pragma once
#include <cstddef>
#include <cstdint>

#include "io/checksum.h"

namespace vmerge {

// The xxh64 of a block, computed while it is assembled: when the reads land in the block one
// after another from its start (a plain copy of contiguous source runs), each piece is hashed
// right after it is read, while it is in the CPU cache. A block filled any other way (a box
// gathered through a span buffer, rows left zero) is hashed whole at the end.
class SequentialBlockHash {
public:
    void begin(const unsigned char* block, size_t size);
    // Bytes [at, at + size) were just read (into the block or elsewhere).
    void landed(const unsigned char* at, size_t size);
    // Bytes of the block were written by other means.
    void disturb() { sequential_ = false; }
    uint64_t finish();

private:
    Xxh64Stream stream_;
    const unsigned char* block_ = nullptr;
    const unsigned char* next_ = nullptr;
    size_t size_ = 0;
    bool active_ = false;
    bool sequential_ = false;
};

}  // namespace vmerge
