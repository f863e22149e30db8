#include "hdf5/archive_layout.h"

#include <algorithm>
#include <map>

#include "core/error.h"

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

}  // namespace vmerge
