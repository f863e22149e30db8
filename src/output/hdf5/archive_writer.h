#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "output/hdf5/mpi_c.h"  // first: the C API only
#include "hdf5/hdf5_handle.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// What the root of model.h5 records instead of model.safetensors.index.json.
struct ArchiveIndex {
    uint64_t total_size = 0;                // sum of tensor bytes (the index's metadata.total_size)
    std::vector<std::string> tensor_names;  // in output order: converting back gives the same shards
    std::string compression = "none";       // "none" or "zstd:LEVEL"
};

// Writes model.h5 (docs/hdf5.md), opened by this process alone (the sec2 driver), or by every rank
// of a communicator together (`mpi_io`: the MPI-IO driver, uncompressed archives under MPI). With
// MPI-IO every rank must call the constructor, add_file, write_index and close in the same order
// with the same arguments (HDF5 metadata operations are collective).
class ArchiveWriter {
public:
    // Creates every dataset (in tensor order): compressed and chunked by `chunk_rows[t]` rows
    // when that is > 0 (each chunk allocated when its frame is written), else contiguous (space
    // allocated at creation and never filled). The names must have passed check_archive_paths
    // (collectively, before any rank opens). Compressed datasets need sec2 (no `mpi_io`).
    ArchiveWriter(const std::string& path, const std::vector<OutputTensor>& tensors,
                  const std::vector<int64_t>& chunk_rows, int zstd_level, const MPI_Comm* mpi_io = nullptr);
    ~ArchiveWriter();
    ArchiveWriter(const ArchiveWriter&) = delete;
    ArchiveWriter& operator=(const ArchiveWriter&) = delete;

    bool parallel() const { return parallel_; }

    // Rows [row_begin, row_end) of `tensor`, `data` in the stored dtype's bytes: independent
    // writes under MPI-IO (contiguous datasets only); a compressed dataset's rows go through
    // HDF5's filter pipeline (whole chunks; merges write frames with write_chunk instead).
    void write_rows(size_t tensor, int64_t row_begin, int64_t row_end, const void* data);
    // The chunk of compressed dataset `tensor` that starts at row `chunk_row`: `frame` is what
    // the zstd filter makes of it (ChunkCompressor), stored as it is (H5Dwrite_chunk).
    void write_chunk(size_t tensor, int64_t chunk_row, const void* frame, size_t size);
    // A non-weight HF file kept inside the archive (rank 0's bytes are written).
    void add_file(const std::string& relative_path, const std::string& bytes);
    void write_index(const ArchiveIndex& index);
    // Closes the file; HDF5 flushes its metadata here, so failures surface here.
    void close();

private:
    std::string path_;
    const std::vector<OutputTensor>& tensors_;
    std::vector<int64_t> chunk_rows_;
    bool parallel_ = false;
    int rank_ = 0;
    H5Handle file_;
    H5Handle independent_;  // transfer property list of MPI-IO writes
    std::vector<H5Handle> types_;
    std::vector<H5Handle> datasets_;
};

}  // namespace vmerge
