#include "hdf5/archive_storage.h"

#include <iomanip>
#include <map>
#include <sstream>

#include "core/human_units.h"
#include "hdf5/hdf5_handle.h"

namespace vmerge {

uint64_t archive_stored_size(const std::vector<ArchiveTensor>& tensors) {
    uint64_t stored = 0;
    for (const auto& t : tensors) stored += t.stored_bytes;
    return stored;
}

std::vector<uint64_t> archive_stored_bytes(const std::string& path, const std::vector<std::string>& dataset_paths) {
    quiet_hdf5_errors();
    const H5Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "HDF5 file access properties");
    checked(H5Pset_fapl_sec2(fapl), "HDF5 sec2 driver");
    const H5Handle file = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose, path + ": cannot open");
    std::vector<uint64_t> stored;
    for (const std::string& dataset_path : dataset_paths) {
        const H5Handle dataset =
            checked(H5Dopen2(file, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, path + " /" + dataset_path);
        stored.push_back(H5Dget_storage_size(dataset));
    }
    return stored;
}

std::vector<ArchiveDtypeStorage> archive_storage_by_dtype(const std::vector<ArchiveTensor>& tensors) {
    std::map<DType, ArchiveDtypeStorage> by;
    for (const auto& t : tensors) {
        auto& s = by[t.dtype];
        s.dtype = t.dtype;
        s.tensors += 1;
        s.bytes += t.nbytes();
        s.stored_bytes += t.stored_bytes;
    }
    std::vector<ArchiveDtypeStorage> out;
    for (auto& [_, s] : by) out.push_back(s);
    return out;
}

std::string archive_ratio_text(uint64_t bytes, uint64_t stored) {
    std::ostringstream s;
    s << std::fixed << std::setprecision(3) << (stored ? static_cast<double>(bytes) / static_cast<double>(stored) : 0.0);
    return s.str();
}

std::vector<std::string> archive_storage_lines(const std::vector<ArchiveTensor>& tensors) {
    std::vector<std::string> lines;
    for (const auto& s : archive_storage_by_dtype(tensors)) {
        std::ostringstream line;
        line << std::left << std::setw(7) << safetensors_name(s.dtype) << std::right << " " << s.tensors << " tensors, "
             << human_bytes(s.bytes) << " -> " << human_bytes(s.stored_bytes) << " stored (ratio "
             << archive_ratio_text(s.bytes, s.stored_bytes) << ")";
        lines.push_back(line.str());
    }
    return lines;
}

}  // namespace vmerge
