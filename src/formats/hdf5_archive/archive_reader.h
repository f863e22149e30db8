#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hdf5/archive_storage.h"
#include "hdf5/hdf5_handle.h"

namespace vmerge {

// Reads a model.h5 written by ArchiveWriter (sec2, read-only; each rank opens it on its own).
// The archive is untrusted input and every read goes through here: each dataset is reached by
// hard links only, checked by check_archive_dataset when opened (storage, layout, dataspace,
// type, allocation: exactly what ArchiveWriter writes) and against its attributes, and each
// compressed chunk is read raw and decoded here (zstd_decode_chunk: one frame of exactly the
// chunk's size), never through HDF5's filter pipeline. Anything else is one Error naming the
// archive and the dataset path.
class ArchiveReader {
public:
    explicit ArchiveReader(const std::string& path);

    const std::vector<ArchiveTensor>& tensors() const { return tensors_; }  // in output order
    uint64_t stored_size() const { return archive_stored_size(tensors_); }  // bytes on disk for all tensors
    uint64_t total_size() const { return total_size_; }
    const std::string& compression() const { return compression_; }

    // Rows [row_begin, row_end) of tensor `t`, as stored (no conversion), into `out`.
    void read_rows(size_t t, int64_t row_begin, int64_t row_end, void* out);
    // Every tensor read and every chunk decoded (verify): throws the Error of the first bad one.
    void read_everything();
    // The non-weight HF files kept in the archive: (relative path, bytes).
    std::vector<std::pair<std::string, std::string>> files();

private:
    void open_tensor(const std::string& name, int zstd_level);
    void read_chunks(size_t t, int64_t row_begin, int64_t row_end, unsigned char* out);

    std::string path_;
    H5Handle file_;
    std::vector<ArchiveTensor> tensors_;
    std::vector<H5Handle> datasets_;
    uint64_t total_size_ = 0;
    std::string compression_;
    std::vector<unsigned char> frame_;  // the raw chunk being decoded
    std::vector<unsigned char> chunk_;  // a chunk of which only some rows are wanted
};

}  // namespace vmerge
