#include "output/hdf5/chunk_compressor.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace vmerge {

void ChunkCompressor::compress(const ChunkGeometry& g, int64_t row_begin, int64_t row_end, const unsigned char* data,
                               size_t size, const Emit& emit) {
    const std::string rows = g.name + " rows " + std::to_string(row_begin) + ".." + std::to_string(row_end);
    if (g.chunk_rows <= 0 || row_begin < 0 || row_begin % g.chunk_rows != 0 || row_end > g.rows ||
        (row_end % g.chunk_rows != 0 && row_end != g.rows) ||
        size != static_cast<size_t>(row_end - row_begin) * g.row_bytes)
        throw Error("internal: " + rows + " (" + std::to_string(size) + " bytes) are not whole chunks of " +
                    std::to_string(g.chunk_rows) + " rows");
    const size_t chunk_bytes = static_cast<size_t>(g.chunk_rows) * g.row_bytes;
    frame_.resize(zstd_frame_bound(chunk_bytes));
    for (int64_t row = row_begin; row < row_end; row += g.chunk_rows) {
        const int64_t end = std::min(row_end, row + g.chunk_rows);
        const unsigned char* chunk = data + static_cast<size_t>(row - row_begin) * g.row_bytes;
        if (end - row < g.chunk_rows) {
            const size_t valid = static_cast<size_t>(end - row) * g.row_bytes;
            padded_.assign(chunk_bytes, 0);
            std::memcpy(padded_.data(), chunk, valid);
            chunk = padded_.data();
        }
        size_t n = 0;
        try {
            n = zstd_.compress(chunk, chunk_bytes, frame_.data(), frame_.size());
        } catch (const Error& e) {
            throw Error(g.name + ": compressing the chunk at row " + std::to_string(row) + ": " + e.what());
        }
        emit(row, end, frame_.data(), n);
    }
}

}  // namespace vmerge
