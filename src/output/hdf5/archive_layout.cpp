#include "output/hdf5/archive_layout.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "plan/rank_work.h"

namespace vmerge {

std::string archive_dataset_path(const std::string& hf_name) {
    if (hf_name.empty()) throw Error("tensor with an empty name cannot be stored in an HDF5 archive");
    if (hf_name.find('/') != std::string::npos)
        throw Error("tensor " + hf_name + ": a '/' in the name cannot be an HDF5 dataset path (dots become groups)");
    std::string path = hf_name;
    std::replace(path.begin(), path.end(), '.', '/');
    if (path.front() == '/' || path.back() == '/' || path.find("//") != std::string::npos)
        throw Error("tensor " + hf_name + ": an empty component between dots cannot be an HDF5 group");
    return path;
}

void check_archive_paths(const std::vector<OutputTensor>& tensors) {
    std::map<std::string, std::string> datasets;  // path -> tensor name
    for (const auto& t : tensors) datasets[archive_dataset_path(t.name)] = t.name;
    const std::string files = std::string(kArchiveFilesGroup) + "/";
    for (const auto& [path, name] : datasets) {
        if (path == kArchiveFilesGroup || path.starts_with(files))
            throw Error("tensor " + name + ": its dataset path " + path + " is the archive's group of HF files");
        // Members of a group `path` sort from `path/` on.
        auto next = datasets.lower_bound(path + "/");
        if (next != datasets.end() && next->first.starts_with(path + "/"))
            throw Error("tensors " + name + " and " + next->second + ": " + path +
                        " would have to be both a dataset and a group in the HDF5 archive");
    }
}

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
