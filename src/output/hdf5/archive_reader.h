#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "output/hdf5/hdf5_handle.h"
#include "core/tensor_mapping.h"

namespace vmerge {

struct ArchiveTensor {
    std::string name;
    std::string dataset_path;  // in the archive (archive_dataset_path of the name)
    DType dtype = DType::F32;
    Shape shape;
    int64_t chunk_rows = 0;    // 0: contiguous
    bool compressed = false;
    uint64_t stored_bytes = 0;  // on disk (H5Dget_storage_size)
    uint64_t nbytes() const { return static_cast<uint64_t>(numel(shape)) * element_size(dtype); }
};

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
    uint64_t stored_size() const;  // bytes on disk for all tensors
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

// Bytes of tensors and bytes on disk, by dtype (inspect, and the summary of a merge).
struct ArchiveDtypeStorage {
    DType dtype = DType::F32;
    size_t tensors = 0;
    uint64_t bytes = 0;
    uint64_t stored_bytes = 0;
};
std::vector<ArchiveDtypeStorage> archive_storage_by_dtype(const std::vector<ArchiveTensor>& tensors);

// "1.234": bytes / stored, three decimals (0 when nothing is stored).
std::string archive_ratio_text(uint64_t bytes, uint64_t stored);
// One line per dtype: "bf16  12 tensors, 1.0 MiB -> 700 KiB stored (ratio 1.463)".
std::vector<std::string> archive_storage_lines(const std::vector<ArchiveTensor>& tensors);

}  // namespace vmerge
