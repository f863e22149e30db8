#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hdf5/zstd_codec.h"

namespace vmerge {

// The chunks of one compressed dataset: whole rows, `chunk_rows` a chunk, `rows` in all.
struct ChunkGeometry {
    std::string name;  // the tensor, for errors
    uint64_t row_bytes = 0;
    int64_t chunk_rows = 0;
    int64_t rows = 0;
};

// Turns row blocks into the zstd frames HDF5's filter 32015 would store for their chunks, so the
// frames can be written raw (H5Dwrite_chunk) by whichever rank holds the file. A frame holds a
// whole chunk: the last chunk of a tensor is padded with zero bytes to the chunk's size, as the
// HDF5 filter pipeline pads an edge chunk (its valid rows are the tensor's; readers drop the rest).
// Pure zstd, no HDF5 or MPI; one thread at a time.
class ChunkCompressor {
public:
    explicit ChunkCompressor(int level) : zstd_(level) {}
    // (first row of the chunk, one past its last valid row, the frame): valid until the next call.
    using Emit = std::function<void(int64_t chunk_begin, int64_t chunk_end, const unsigned char* frame, size_t size)>;
    // Rows [row_begin, row_end): `row_begin` on a chunk boundary, `row_end` on one or the tensor's
    // end (the planner aligns blocks with chunks). Throws Error (a zstd failure, misaligned rows).
    void compress(const ChunkGeometry& g, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size,
                  const Emit& emit);

private:
    ZstdFrameCompressor zstd_;
    std::vector<unsigned char> padded_;  // the zero-padded last chunk of a tensor
    std::vector<unsigned char> frame_;
};

}  // namespace vmerge
