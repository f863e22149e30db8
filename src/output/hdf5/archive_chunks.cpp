#include "output/hdf5/archive_chunks.h"

#include <algorithm>

#include "core/error.h"
#include "plan/rank_work.h"

namespace vmerge {

int64_t archive_chunk_rows(const OutputTensor& t, uint64_t chunk_bytes) {
    if (t.shape.empty() || t.nbytes() == 0) return 0;
    const uint64_t per_row = row_bytes(t);
    const int64_t rows = static_cast<int64_t>(std::max<uint64_t>(1, chunk_bytes / per_row));
    // HDF5 chunks are below 4 GiB.
    if (per_row >= (4ull << 30)) throw Error("tensor " + t.name + ": one row of " + std::to_string(per_row) +
                                             " bytes exceeds HDF5's 4 GiB chunk limit");
    return std::min(rows, row_count(t));
}

}  // namespace vmerge
