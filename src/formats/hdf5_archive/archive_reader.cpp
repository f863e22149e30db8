#include "formats/hdf5_archive/archive_reader.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/input_file.h"
#include "formats/hdf5_archive/archive_dataset_check.h"
#include "hdf5/archive_layout.h"
#include "hdf5/row_selection.h"
#include "hdf5/zstd_codec.h"
#include "io/output_names.h"

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

uint64_t row_bytes_of(const ArchiveTensor& t) {
    return t.shape.empty() || t.shape[0] == 0 ? t.nbytes() : t.nbytes() / static_cast<uint64_t>(t.shape[0]);
}

// "none" -> 0, "zstd:L" -> L (1..22): what the root's compression attribute may say.
int compression_level(const std::string& compression, const std::string& where) {
    if (compression == "none") return 0;
    int level = 0;
    const char* digits = compression.data() + 5;
    const char* end = compression.data() + compression.size();
    if (compression.starts_with("zstd:") && std::from_chars(digits, end, level).ptr == end && digits != end &&
        level >= kZstdMinLevel && level <= kZstdMaxLevel)
        return level;
    throw Error(where + ": compression '" + compression + "', expected none or zstd:1..22");
}

const char* link_kind(H5L_type_t type) {
    switch (type) {
        case H5L_TYPE_SOFT: return "a soft link";
        case H5L_TYPE_EXTERNAL: return "an external link (to an object in another file)";
        default: return "a user-defined link";
    }
}

// Every link on the way to `path` is a hard link: an external link would open another file (a
// FIFO hangs) and a soft link would alias another dataset. Checked from the root down, so no
// link is followed before it is checked.
void check_hard_links(hid_t file, const std::string& path, const std::string& where, const std::string& listed) {
    for (size_t slash = path.find('/');; slash = path.find('/', slash + 1)) {
        const std::string prefix = path.substr(0, slash);
        if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) throw Error(where + ": missing (" + listed + ")");
        H5L_info_t info;
        checked(H5Lget_info(file, prefix.c_str(), &info, H5P_DEFAULT), where + ": link /" + prefix);
        if (info.type != H5L_TYPE_HARD)
            throw Error(where + ": /" + prefix + " is " + link_kind(info.type) +
                        "; expected groups and datasets of the archive itself");
        if (slash == std::string::npos) return;
    }
}

}  // namespace

ArchiveReader::ArchiveReader(const std::string& path) : path_(path) {
    quiet_hdf5_errors();
    // No filter is registered: compressed chunks are decoded here (read_chunks), never by HDF5.
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
    const int level = compression_level(compression_, path + " /");
    uint64_t sum = 0;
    for (const std::string& name : read_strings(root, "tensor_names", path + " /")) {
        open_tensor(name, level);
        sum += tensors_.back().nbytes();
    }
    if (sum != total_size_)
        throw Error(path + ": total_size says " + std::to_string(total_size_) + " bytes, the tensors hold " +
                    std::to_string(sum));
}

void ArchiveReader::open_tensor(const std::string& name, int zstd_level) {
    ArchiveTensor t;
    t.name = name;
    t.dataset_path = archive_dataset_path(name);
    const std::string where = path_ + " /" + t.dataset_path;
    check_hard_links(file_, t.dataset_path, where, "tensor_names lists " + name);
    H5Handle dataset = checked(H5Dopen2(file_, t.dataset_path.c_str(), H5P_DEFAULT), H5Dclose, where);
    if (read_string(dataset, "hf_name", where) != name) throw Error(where + ": attribute hf_name is not " + name);
    const std::string dtype = read_string(dataset, "dtype", where);
    const auto parsed = dtype_from_safetensors(dtype);
    if (!parsed) throw Error(where + ": unknown dtype '" + dtype + "'");
    t.dtype = *parsed;
    t.shape = read_integers(dataset, "shape", where);
    for (const int64_t d : t.shape)
        if (d < 0) throw Error(where + ": attribute shape " + shape_to_string(t.shape) + " has a negative size");
    // Zero-size and 0-d tensors are stored contiguous whatever the compression.
    const bool chunkable = !t.shape.empty() && t.nbytes() > 0;
    const StoredDataset stored = check_archive_dataset(dataset, {t.dtype, t.shape, chunkable ? zstd_level : 0}, where);
    t.chunk_rows = stored.chunk_rows;
    t.compressed = stored.chunk_rows > 0;
    t.stored_bytes = H5Dget_storage_size(dataset);
    tensors_.push_back(std::move(t));
    datasets_.push_back(std::move(dataset));
}

void ArchiveReader::read_rows(size_t index, int64_t row_begin, int64_t row_end, void* out) {
    const ArchiveTensor& t = tensors_[index];
    if (t.chunk_rows > 0) {
        if (row_end > row_begin) read_chunks(index, row_begin, row_end, static_cast<unsigned char*>(out));
        return;
    }
    const hid_t dataset = datasets_[index];
    const std::string what = path_ + " /" + t.dataset_path + ": reading rows " + std::to_string(row_begin) + ".." +
                             std::to_string(row_end);
    const H5Handle type = checked(H5Dget_type(dataset), H5Tclose, what);
    const H5Handle file_space = checked(H5Dget_space(dataset), H5Sclose, what);
    const H5Handle memory_space = select_rows(file_space, t.shape, row_begin, row_end, what);
    // The file type (checked to be what vmerge writes) as memory type: the bytes as stored.
    checked(H5Dread(dataset, type, memory_space, file_space, H5P_DEFAULT, out), what);
}

// Each chunk read raw and decoded here: HDF5's filter pipeline would take a frame of any size
// (uninitialised bytes after a short one, a large allocation for one that claims 1 GiB).
void ArchiveReader::read_chunks(size_t index, int64_t row_begin, int64_t row_end, unsigned char* out) {
    const ArchiveTensor& t = tensors_[index];
    const uint64_t row = row_bytes_of(t);
    const uint64_t chunk_bytes = static_cast<uint64_t>(t.chunk_rows) * row;
    for (int64_t first = row_begin / t.chunk_rows * t.chunk_rows; first < row_end; first += t.chunk_rows) {
        const std::string where = path_ + " /" + t.dataset_path + ": the chunk at row " + std::to_string(first);
        std::vector<hsize_t> offset(t.shape.size(), 0);
        offset[0] = static_cast<hsize_t>(first);
        unsigned mask = 0;
        haddr_t address = HADDR_UNDEF;
        hsize_t size = 0;
        checked(H5Dget_chunk_info_by_coord(datasets_[index], offset.data(), &mask, &address, &size), where);
        if (address == HADDR_UNDEF || size == 0)
            throw Error(where + ": never written (not allocated); expected a zstd frame of its " +
                        std::to_string(chunk_bytes) + " bytes");
        if (mask != 0)
            throw Error(where + ": stored with the zstd filter skipped (filter mask " + std::to_string(mask) +
                        "); expected a zstd frame");
        if (size > zstd_frame_bound(chunk_bytes))
            throw Error(where + ": " + std::to_string(size) + " stored bytes, more than a zstd frame of its " +
                        std::to_string(chunk_bytes) + " bytes can take (" + std::to_string(zstd_frame_bound(chunk_bytes)) + ")");
        frame_.resize(size);
        uint32_t filters = 0;
        checked(H5Dread_chunk(datasets_[index], H5P_DEFAULT, offset.data(), &filters, frame_.data()), where);
        const int64_t begin = std::max(first, row_begin), end = std::min(first + t.chunk_rows, row_end);
        const bool whole = begin == first && end == first + t.chunk_rows;
        if (!whole) chunk_.resize(chunk_bytes);
        unsigned char* into = whole ? out + static_cast<uint64_t>(first - row_begin) * row : chunk_.data();
        try {
            zstd_decode_chunk(frame_.data(), frame_.size(), into, chunk_bytes);
        } catch (const Error& e) {
            throw Error(where + ": " + e.what());
        }
        if (!whole)
            std::memcpy(out + static_cast<uint64_t>(begin - row_begin) * row,
                        chunk_.data() + static_cast<uint64_t>(begin - first) * row, static_cast<uint64_t>(end - begin) * row);
    }
}

void ArchiveReader::read_everything() {
    constexpr uint64_t kPieceBytes = 64ull << 20;
    std::vector<unsigned char> piece;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const ArchiveTensor& t = tensors_[i];
        if (t.nbytes() == 0) continue;
        const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
        const uint64_t row = row_bytes_of(t);
        // Whole chunks per piece, so each is decoded once.
        int64_t step = std::max<int64_t>(1, static_cast<int64_t>(kPieceBytes / row));
        if (t.chunk_rows > 0) step = std::max(t.chunk_rows, step / t.chunk_rows * t.chunk_rows);
        step = std::min(step, rows);
        piece.resize(static_cast<uint64_t>(step) * row);
        for (int64_t r = 0; r < rows; r += step) read_rows(i, r, std::min(rows, r + step), piece.data());
    }
    files();
}

std::vector<std::pair<std::string, std::string>> ArchiveReader::files() {
    std::vector<std::pair<std::string, std::string>> out;
    if (H5Lexists(file_, kArchiveFilesGroup, H5P_DEFAULT) <= 0) return out;
    const std::string group_where = path_ + " /" + kArchiveFilesGroup;
    check_hard_links(file_, kArchiveFilesGroup, group_where, "");
    const H5Handle group = checked(H5Gopen2(file_, kArchiveFilesGroup, H5P_DEFAULT), H5Gclose, group_where);
    // H5Lvisit descends through hard links only; every other link is refused below, unfollowed.
    std::vector<std::pair<std::string, H5L_type_t>> links;
    checked(H5Lvisit(group, H5_INDEX_NAME, H5_ITER_INC,
                     [](hid_t, const char* name, const H5L_info_t* info, void* data) -> herr_t {
                         static_cast<std::vector<std::pair<std::string, H5L_type_t>>*>(data)->emplace_back(name, info->type);
                         return 0;
                     },
                     &links),
            group_where + ": listing the HF files");
    for (const auto& [name, type] : links) {
        const std::string where = group_where + "/" + name;
        if (type != H5L_TYPE_HARD)
            throw Error(where + ": " + link_kind(type) + "; expected the file's bytes as a dataset in the archive");
        const H5Handle object = checked(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose, where);
        if (H5Iget_type(object) != H5I_DATASET) continue;
        if (name.find("..") != std::string::npos) throw Error(where + ": a file name with '..' is not extracted");
        // A copied file never takes the name of a file the weights are written to.
        if (is_weight_file(std::filesystem::path(name).filename().string()))
            throw Error(where + ": '" + name + "' is the name of a weight file, index or checksum list, not of a "
                        "configuration or tokenizer file (the archive's weights are its tensor datasets); not extracted");
        const H5Handle dataset = checked(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose, where);
        const StoredDataset stored = check_archive_dataset(dataset, {DType::U8, std::nullopt, 0}, where);
        std::string bytes(static_cast<size_t>(stored.shape[0]), '\0');
        if (!bytes.empty())
            checked(H5Dread(dataset, H5T_STD_U8LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()), where);
        out.emplace_back(name, std::move(bytes));
    }
    return out;
}

}  // namespace vmerge
