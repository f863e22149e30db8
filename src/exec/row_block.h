#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

namespace vmerge {

// Assembled output rows [row_begin, row_end) of `tensor`, already in the output dtype.
struct RowBlock {
    size_t tensor = 0;
    int64_t row_begin = 0, row_end = 0;
    const unsigned char* data = nullptr;
    size_t size = 0;
    // The xxh64 of the bytes, when the executor was asked for it (hash_blocks) and could compute
    // it on its reading thread (blocks that need no cast on the writer thread).
    std::optional<uint64_t> xxh64;
};

}  // namespace vmerge
