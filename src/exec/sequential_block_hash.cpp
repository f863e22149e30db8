#include "exec/sequential_block_hash.h"

namespace vmerge {

void SequentialBlockHash::begin(const unsigned char* block, size_t size) {
    stream_.reset();
    block_ = next_ = block;
    size_ = size;
    active_ = sequential_ = true;
}

void SequentialBlockHash::landed(const unsigned char* at, size_t size) {
    if (!active_ || !sequential_) return;
    if (at != next_ || size > size_ - static_cast<size_t>(next_ - block_)) {
        sequential_ = false;
        return;
    }
    stream_.update(at, size);
    next_ += size;
}

uint64_t SequentialBlockHash::finish() {
    active_ = false;
    if (sequential_ && next_ == block_ + size_) return stream_.digest();
    return xxh64(block_, size_);
}

}  // namespace vmerge
