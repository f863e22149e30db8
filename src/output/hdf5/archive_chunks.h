#pragma once
#include <cstdint>

#include "core/tensor_mapping.h"

namespace vmerge {

// Chunks of compressed datasets hold about this many bytes (whole rows): large enough for the
// codec, small enough that several fit one rank's --max-memory.
constexpr uint64_t kArchiveChunkBytes = 4ull << 20;

// Rows per chunk of a compressed dataset, 0 for one stored contiguous (a 0-d or empty tensor:
// HDF5 chunks need a non-empty, at least 1-d shape). Rank work is split at multiples of it so
// every chunk has one writer.
int64_t archive_chunk_rows(const OutputTensor& t, uint64_t chunk_bytes = kArchiveChunkBytes);

}  // namespace vmerge
