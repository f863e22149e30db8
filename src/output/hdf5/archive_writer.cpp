#include "output/hdf5/archive_writer.h"

#include "hdf5/archive_layout.h"
#include "hdf5/row_selection.h"
#include "hdf5/h5z_zstd_filter.h"
#include "hdf5/hdf5_dtype.h"
#include "core/error.h"

namespace vmerge {
namespace {

void write_string_attribute(hid_t object, const char* name, const std::string& value) {
    const H5Handle type = string_type();
    const H5Handle space = checked(H5Screate(H5S_SCALAR), H5Sclose, "HDF5 dataspace");
    const H5Handle attr = checked(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                                  std::string("HDF5 attribute ") + name);
    const char* pointer = value.c_str();
    checked(H5Awrite(attr, type, &pointer), std::string("HDF5 attribute ") + name);
}

void write_strings_attribute(hid_t object, const char* name, const std::vector<std::string>& values) {
    const H5Handle type = string_type();
    const hsize_t n = values.size();
    const H5Handle space = checked(H5Screate_simple(1, &n, nullptr), H5Sclose, "HDF5 dataspace");
    const H5Handle attr = checked(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                                  std::string("HDF5 attribute ") + name);
    std::vector<const char*> pointers;
    for (const auto& v : values) pointers.push_back(v.c_str());
    if (!pointers.empty()) checked(H5Awrite(attr, type, pointers.data()), std::string("HDF5 attribute ") + name);
}

template <typename T>
void write_number_attribute(hid_t object, const char* name, hid_t type, const std::vector<T>& values, bool scalar) {
    const hsize_t n = values.size();
    const H5Handle space = checked(scalar ? H5Screate(H5S_SCALAR) : values.empty() ? H5Screate(H5S_NULL)
                                                                                 : H5Screate_simple(1, &n, nullptr),
                                   H5Sclose, "HDF5 dataspace");
    const H5Handle attr = checked(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                                  std::string("HDF5 attribute ") + name);
    if (!values.empty()) checked(H5Awrite(attr, type, values.data()), std::string("HDF5 attribute ") + name);
}

// The dataspace of a tensor: its shape, or a scalar for a 0-d tensor.
H5Handle tensor_space(const Shape& shape) {
    if (shape.empty()) return checked(H5Screate(H5S_SCALAR), H5Sclose, "HDF5 dataspace");
    const std::vector<hsize_t> dims(shape.begin(), shape.end());
    return checked(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose, "HDF5 dataspace");
}

H5Handle link_properties() {
    H5Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "HDF5 link properties");
    checked(H5Pset_create_intermediate_group(lcpl, 1), "HDF5 link properties");
    checked(H5Pset_char_encoding(lcpl, H5T_CSET_UTF8), "HDF5 link properties");
    return lcpl;
}

// No fill: every byte is written once, by the rank that owns it. Contiguous data is allocated
// at creation (in parallel HDF5 1.10 it is anyway); a compressed chunk when its frame is written
// (H5Dwrite_chunk), at the frame's size, so no placeholder is allocated and left unused.
H5Handle creation_properties(const OutputTensor& t, int64_t chunk_rows, int zstd_level) {
    H5Handle dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "HDF5 dataset properties");
    checked(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "HDF5 fill time");
    checked(H5Pset_alloc_time(dcpl, chunk_rows > 0 ? H5D_ALLOC_TIME_INCR : H5D_ALLOC_TIME_EARLY),
            "HDF5 allocation time");
    if (chunk_rows > 0) {
        std::vector<hsize_t> chunk(t.shape.begin(), t.shape.end());
        chunk[0] = static_cast<hsize_t>(chunk_rows);
        checked(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), "HDF5 chunk shape of " + t.name);
        const unsigned level = static_cast<unsigned>(zstd_level);
        checked(H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level), "HDF5 zstd filter");
    } else {
        checked(H5Pset_layout(dcpl, H5D_CONTIGUOUS), "HDF5 layout");
    }
    return dcpl;
}

}  // namespace

ArchiveWriter::ArchiveWriter(const std::string& path, const std::vector<OutputTensor>& tensors,
                             const std::vector<int64_t>& chunk_rows, int zstd_level, const MPI_Comm* mpi_io)
    : path_(path), tensors_(tensors), chunk_rows_(chunk_rows), parallel_(mpi_io != nullptr) {
    quiet_hdf5_errors();
    if (zstd_level > 0 && H5Zregister(zstd_filter_class()) < 0) throw Error(hdf5_error("registering the zstd filter"));
    H5Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "HDF5 file access properties");
    // 1.8 format at least: dense attribute storage, so a large model's tensor_names fits the root.
    checked(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST), "HDF5 format version bounds");
    independent_ = checked(H5Pcreate(H5P_DATASET_XFER), H5Pclose, "HDF5 transfer properties");
    if (parallel_) {
        MPI_Comm_rank(*mpi_io, &rank_);
        for (const int64_t rows : chunk_rows_)
            if (rows > 0) throw Error("internal: compressed HDF5 datasets are written by one process (sec2)");
        checked(H5Pset_fapl_mpio(fapl, *mpi_io, MPI_INFO_NULL), "HDF5 MPI-IO driver");
        checked(H5Pset_all_coll_metadata_ops(fapl, 1), "HDF5 collective metadata reads");
        checked(H5Pset_coll_metadata_write(fapl, 1), "HDF5 collective metadata writes");
        checked(H5Pset_dxpl_mpio(independent_, H5FD_MPIO_INDEPENDENT), "HDF5 independent transfer");
    } else {
        checked(H5Pset_fapl_sec2(fapl), "HDF5 sec2 driver");
    }
    file_ = checked(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl), H5Fclose, path + ": cannot create");
    const H5Handle lcpl = link_properties();
    for (size_t i = 0; i < tensors.size(); ++i) {
        const OutputTensor& t = tensors[i];
        types_.push_back(hdf5_file_type(t.dtype));
        const H5Handle space = tensor_space(t.shape);
        const H5Handle dcpl = creation_properties(t, chunk_rows_[i], zstd_level);
        datasets_.push_back(checked(H5Dcreate2(file_, archive_dataset_path(t.name).c_str(), types_.back(), space, lcpl,
                                               dcpl, H5P_DEFAULT),
                                    H5Dclose, path + ": cannot create the dataset of " + t.name));
        write_string_attribute(datasets_.back(), "hf_name", t.name);
        write_string_attribute(datasets_.back(), "dtype", std::string(safetensors_name(t.dtype)));
        write_number_attribute(datasets_.back(), "shape", H5T_STD_I64LE, t.shape, false);
    }
}

ArchiveWriter::~ArchiveWriter() = default;

void ArchiveWriter::write_rows(size_t tensor, int64_t row_begin, int64_t row_end, const void* data) {
    const OutputTensor& t = tensors_[tensor];
    const hid_t dataset = datasets_[tensor];
    const std::string what = path_ + ": writing rows " + std::to_string(row_begin) + ".." + std::to_string(row_end) +
                             " of " + t.name;
    const H5Handle file_space = checked(H5Dget_space(dataset), H5Sclose, what);
    const H5Handle memory_space = select_rows(file_space, t.shape, row_begin, row_end, what);
    const hid_t transfer = parallel_ ? independent_.get() : H5P_DEFAULT;
    static const unsigned char nothing = 0;
    checked(H5Dwrite(dataset, types_[tensor], memory_space, file_space, transfer, data ? data : &nothing), what);
}

void ArchiveWriter::write_chunk(size_t tensor, int64_t chunk_row, const void* frame, size_t size) {
    const OutputTensor& t = tensors_[tensor];
    std::vector<hsize_t> offset(t.shape.size(), 0);
    offset.at(0) = static_cast<hsize_t>(chunk_row);
    // Filter mask 0: every filter of the pipeline (the one, zstd) was applied to the frame.
    checked(H5Dwrite_chunk(datasets_[tensor], H5P_DEFAULT, 0, offset.data(), size, frame),
            path_ + ": writing the compressed chunk at row " + std::to_string(chunk_row) + " of " + t.name);
}

void ArchiveWriter::add_file(const std::string& relative_path, const std::string& bytes) {
    const std::string what = path_ + ": storing " + relative_path;
    const hsize_t n = bytes.size();
    const H5Handle space = checked(H5Screate_simple(1, &n, nullptr), H5Sclose, what);
    const H5Handle dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
    checked(H5Pset_layout(dcpl, H5D_CONTIGUOUS), what);
    checked(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), what);
    checked(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), what);
    const std::string name = std::string(kArchiveFilesGroup) + "/" + relative_path;
    const H5Handle dataset = checked(H5Dcreate2(file_, name.c_str(), H5T_STD_U8LE, space, link_properties(), dcpl,
                                                H5P_DEFAULT),
                                     H5Dclose, what);
    // Contiguous data needs no collective write: rank 0 alone writes the bytes.
    if (rank_ == 0 && n > 0)
        checked(H5Dwrite(dataset, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, parallel_ ? independent_.get() : H5P_DEFAULT,
                         bytes.data()),
                what);
}

void ArchiveWriter::write_index(const ArchiveIndex& index) {
    const H5Handle root = checked(H5Gopen2(file_, "/", H5P_DEFAULT), H5Gclose, path_ + ": root group");
    write_number_attribute<int64_t>(root, "vmerge_archive_version", H5T_STD_I64LE, {1}, true);
    write_number_attribute<uint64_t>(root, "total_size", H5T_STD_U64LE, {index.total_size}, true);
    write_strings_attribute(root, "tensor_names", index.tensor_names);
    write_string_attribute(root, "compression", index.compression);
    write_string_attribute(root, "files_group", kArchiveFilesGroup);
}

void ArchiveWriter::close() {
    datasets_.clear();
    if (file_.close() < 0) throw Error(hdf5_error(path_ + ": closing (flushing HDF5 metadata) failed"));
}

}  // namespace vmerge
