#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "output/hdf5/hdf5_handle.h"
#include "mapping/tensor_mapping.h"

namespace vmerge {

// What the root of model.h5 records instead of model.safetensors.index.json.
struct ArchiveIndex {
    uint64_t total_size = 0;                // sum of tensor bytes (the index's metadata.total_size)
    std::vector<std::string> tensor_names;  // in output order: converting back gives the same shards
    std::string compression = "none";       // "none" or "zstd:LEVEL"
};

// Writes model.h5 (docs/hdf5.md). When MPI is initialised, every rank of MPI_COMM_WORLD opens
// the file with the MPI-IO driver and must call the constructor, add_file, write_index and
// close in the same order with the same arguments (HDF5 metadata operations are collective);
// without MPI (one process) it uses the sec2 driver.
class ArchiveWriter {
public:
    // Creates every dataset (in tensor order): compressed and chunked by `chunk_rows[t]` rows
    // when that is > 0, else contiguous. Space is allocated at creation and never filled.
    // The names must have passed check_archive_paths (collectively, before any rank opens).
    ArchiveWriter(const std::string& path, const std::vector<OutputTensor>& tensors,
                  const std::vector<int64_t>& chunk_rows, int zstd_level);
    ~ArchiveWriter();
    ArchiveWriter(const ArchiveWriter&) = delete;
    ArchiveWriter& operator=(const ArchiveWriter&) = delete;

    bool parallel() const { return parallel_; }
    bool compressed(size_t tensor) const { return chunk_rows_[tensor] > 0; }

    // Rows [row_begin, row_end) of `tensor`, `data` in the stored dtype's bytes. Writes to a
    // compressed dataset are collective under MPI (HDF5 1.10 filters them only in collective
    // I/O): every rank calls, a rank with nothing to write passes an empty range. Writes to
    // contiguous datasets are independent.
    void write_rows(size_t tensor, int64_t row_begin, int64_t row_end, const void* data);
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
    H5Handle collective_;   // transfer property list of the collective writes
    H5Handle independent_;  // ... and of the independent ones
    std::vector<H5Handle> types_;
    std::vector<H5Handle> datasets_;
};

}  // namespace vmerge
