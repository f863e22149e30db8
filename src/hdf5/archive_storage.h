#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// One tensor of a model.h5 as stored: what the reader finds in a dataset, and what the writer's
// summary reports of the datasets it wrote.
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

// Bytes on disk for all `tensors`.
uint64_t archive_stored_size(const std::vector<ArchiveTensor>& tensors);

// The bytes on disk of each dataset of the archive at `path`, opened read-only by this process
// (the writer's summary, once the archive is closed). Throws Error.
std::vector<uint64_t> archive_stored_bytes(const std::string& path, const std::vector<std::string>& dataset_paths);

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
