#include "output/hdf5/archive_reader.h"

#include <filesystem>
#include <iomanip>
#include <map>
#include <sstream>

#include "output/hdf5/archive_layout.h"
#include "output/hdf5/h5z_zstd_filter.h"
#include "output/hdf5/row_selection.h"
#include "core/error.h"
#include "output/write_journal.h"
#include "core/human_units.h"
#include "io/input_file.h"

namespace vmerge {
namespace {

bool has_attribute(hid_t object, const char* name) { return H5Aexists(object, name) > 0; }

H5Handle open_attribute(hid_t object, const char* name, const std::string& where) {
    if (!has_attribute(object, name)) throw Error(where + ": no attribute '" + name + "'");
    return checked(H5Aopen(object, name, H5P_DEFAULT), H5Aclose, where + ": attribute " + name);
}

std::vector<std::string> read_strings(hid_t object, const char* name, const std::string& where) {
    const H5Handle attr = open_attribute(object, name, where);
    const H5Handle space = checked(H5Aget_space(attr), H5Sclose, where);
    const H5Handle stored = checked(H5Aget_type(attr), H5Tclose, where);
    if (H5Tget_class(stored) != H5T_STRING || H5Tis_variable_str(stored) <= 0)
        throw Error(where + ": attribute '" + name + "' is not a variable-length string");
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    if (n <= 0) return {};
    std::vector<char*> pointers(static_cast<size_t>(n), nullptr);
    const H5Handle type = string_type();
    checked(H5Aread(attr, type, pointers.data()), where + ": attribute " + name);
    std::vector<std::string> out;
    for (char* p : pointers) out.emplace_back(p ? p : "");
    H5Dvlen_reclaim(type, space, H5P_DEFAULT, pointers.data());
    return out;
}

std::string read_string(hid_t object, const char* name, const std::string& where) {
    auto values = read_strings(object, name, where);
    if (values.size() != 1) throw Error(where + ": attribute '" + name + "' should hold one string");
    return values[0];
}

std::vector<int64_t> read_integers(hid_t object, const char* name, const std::string& where) {
    const H5Handle attr = open_attribute(object, name, where);
    const H5Handle space = checked(H5Aget_space(attr), H5Sclose, where);
    if (H5Sget_simple_extent_type(space) == H5S_NULL) return {};
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    std::vector<int64_t> values(static_cast<size_t>(std::max<hssize_t>(n, 0)));
    checked(H5Aread(attr, H5T_NATIVE_INT64, values.data()), where + ": attribute " + name);
    return values;
}

}  // namespace

ArchiveReader::ArchiveReader(const std::string& path) : path_(path) {
    quiet_hdf5_errors();
    // Readers of compressed archives need no HDF5_PLUGIN_PATH inside vmerge.
    if (H5Zregister(zstd_filter_class()) < 0) throw Error(hdf5_error("registering the zstd filter"));
    std::error_code ec;
    if (std::filesystem::exists(path, ec)) require_regular_file(path);  // a FIFO: refused, not opened
    if (!std::filesystem::is_regular_file(path, ec))
        throw Error(path + ": missing (--backend hdf5 reads the " + kArchiveFileName +
                    " that merge --format hdf5 wrote into its target folder)");
    if (H5Fis_hdf5(path.c_str()) <= 0) throw Error(path + ": not an HDF5 file");
    const H5Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "HDF5 file access properties");
    checked(H5Pset_fapl_sec2(fapl), "HDF5 sec2 driver");
    file_ = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose, path + ": cannot open");
    const H5Handle root = checked(H5Gopen2(file_, "/", H5P_DEFAULT), H5Gclose, path + ": root group");
    if (!has_attribute(root, "vmerge_archive_version"))
        throw Error(path + ": not a vmerge archive (no vmerge_archive_version attribute on /; written by merge --format hdf5?)");
    const auto version = read_integers(root, "vmerge_archive_version", path + " /");
    if (version.size() != 1 || version[0] != 1)
        throw Error(path + ": archive version " + (version.empty() ? "?" : std::to_string(version[0])) +
                    ", this vmerge reads version 1");
    const auto total = read_integers(root, "total_size", path + " /");
    if (total.size() != 1) throw Error(path + " /: attribute 'total_size' should hold one number");
    total_size_ = static_cast<uint64_t>(total[0]);
    compression_ = read_string(root, "compression", path + " /");
    uint64_t sum = 0;
    for (const std::string& name : read_strings(root, "tensor_names", path + " /")) {
        const std::string dataset_path = archive_dataset_path(name);
        const std::string where = path + " /" + dataset_path;
        if (H5Lexists(file_, dataset_path.c_str(), H5P_DEFAULT) <= 0)
            throw Error(where + ": missing (tensor_names lists " + name + ")");
        H5Handle dataset = checked(H5Dopen2(file_, dataset_path.c_str(), H5P_DEFAULT), H5Dclose, where);
        ArchiveTensor t;
        t.name = name;
        if (read_string(dataset, "hf_name", where) != name)
            throw Error(where + ": attribute hf_name is not " + name);
        const std::string dtype = read_string(dataset, "dtype", where);
        const auto parsed = dtype_from_safetensors(dtype);
        if (!parsed) throw Error(where + ": unknown dtype '" + dtype + "'");
        t.dtype = *parsed;
        t.shape = read_integers(dataset, "shape", where);
        const H5Handle space = checked(H5Dget_space(dataset), H5Sclose, where);
        const int rank = H5Sget_simple_extent_ndims(space);
        std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
        if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
        if (Shape(dims.begin(), dims.end()) != t.shape)
            throw Error(where + ": dataspace " + shape_to_string(Shape(dims.begin(), dims.end())) +
                        " differs from its shape attribute " + shape_to_string(t.shape));
        const H5Handle type = checked(H5Dget_type(dataset), H5Tclose, where);
        if (H5Tget_size(type) != element_size(t.dtype))
            throw Error(where + ": stored elements of " + std::to_string(H5Tget_size(type)) + " bytes, dtype " + dtype +
                        " has " + std::to_string(element_size(t.dtype)));
        const H5Handle dcpl = checked(H5Dget_create_plist(dataset), H5Pclose, where);
        if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
            std::vector<hsize_t> chunk(dims.size());
            H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
            t.chunk_rows = chunk.empty() ? 0 : static_cast<int64_t>(chunk[0]);
            t.compressed = H5Pget_nfilters(dcpl) > 0;
        }
        t.stored_bytes = H5Dget_storage_size(dataset);
        sum += t.nbytes();
        tensors_.push_back(std::move(t));
        datasets_.push_back(std::move(dataset));
    }
    if (sum != total_size_)
        throw Error(path + ": total_size says " + std::to_string(total_size_) + " bytes, the tensors hold " +
                    std::to_string(sum));
}

void ArchiveReader::read_rows(size_t index, int64_t row_begin, int64_t row_end, void* out) {
    const ArchiveTensor& t = tensors_[index];
    const hid_t dataset = datasets_[index];
    const std::string what = path_ + ": reading rows " + std::to_string(row_begin) + ".." + std::to_string(row_end) +
                             " of " + t.name;
    const H5Handle type = checked(H5Dget_type(dataset), H5Tclose, what);
    const H5Handle file_space = checked(H5Dget_space(dataset), H5Sclose, what);
    const H5Handle memory_space = select_rows(file_space, t.shape, row_begin, row_end, what);
    // The file type as memory type: the bytes come back as stored (bf16 bits included).
    checked(H5Dread(dataset, type, memory_space, file_space, H5P_DEFAULT, out), what);
}

uint64_t ArchiveReader::stored_size() const {
    uint64_t stored = 0;
    for (const auto& t : tensors_) stored += t.stored_bytes;
    return stored;
}

std::vector<std::pair<std::string, std::string>> ArchiveReader::files() {
    std::vector<std::pair<std::string, std::string>> out;
    if (H5Lexists(file_, kArchiveFilesGroup, H5P_DEFAULT) <= 0) return out;
    const H5Handle group = checked(H5Gopen2(file_, kArchiveFilesGroup, H5P_DEFAULT), H5Gclose, path_ + ": HF files");
    std::vector<std::string> links;
    checked(H5Lvisit(group, H5_INDEX_NAME, H5_ITER_INC,
                     [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
                         static_cast<std::vector<std::string>*>(data)->push_back(name);
                         return 0;
                     },
                     &links),
            path_ + ": listing the HF files");
    std::vector<std::string> names;
    for (const std::string& link : links) {
        const H5Handle object = checked(H5Oopen(group, link.c_str(), H5P_DEFAULT), H5Oclose, path_ + ": " + link);
        if (H5Iget_type(object) == H5I_DATASET) names.push_back(link);
    }
    for (const std::string& name : names) {
        const std::string where = path_ + " /" + kArchiveFilesGroup + "/" + name;
        if (name.find("..") != std::string::npos) throw Error(where + ": a file name with '..' is not extracted");
        // A copied file never takes the name of a file the weights are written to.
        if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json") || name == kChecksumsFile)
            throw Error(where + ": '" + name + "' is not a configuration or tokenizer file name (the archive's weights "
                        "are under /tensors); not extracted");
        const H5Handle dataset = checked(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose, where);
        const H5Handle space = checked(H5Dget_space(dataset), H5Sclose, where);
        const H5Handle type = checked(H5Dget_type(dataset), H5Tclose, where);
        if (H5Sget_simple_extent_ndims(space) != 1 || H5Tget_size(type) != 1)
            throw Error(where + ": expected a 1-d dataset of bytes");
        std::string bytes(static_cast<size_t>(H5Sget_simple_extent_npoints(space)), '\0');
        if (!bytes.empty()) checked(H5Dread(dataset, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), where);
        out.emplace_back(name, std::move(bytes));
    }
    return out;
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
