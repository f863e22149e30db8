#include "formats/hdf5_archive/archive_dataset_check.h"

#include <vector>

#include "core/error.h"
#include "hdf5/h5z_zstd_filter.h"
#include "hdf5/hdf5_dtype.h"

namespace vmerge {
namespace {

std::string dims_text(const std::vector<hsize_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i)
        s += (i ? ", " : "") + (dims[i] == H5S_UNLIMITED ? std::string("unlimited") : std::to_string(dims[i]));
    return s + "]";
}

std::string order_name(H5T_order_t order) {
    switch (order) {
        case H5T_ORDER_LE: return "little-endian";
        case H5T_ORDER_BE: return "big-endian";
        case H5T_ORDER_VAX: return "VAX-order";
        case H5T_ORDER_MIXED: return "mixed-order";
        default: return "unordered";
    }
}

std::string class_name(H5T_class_t c) {
    switch (c) {
        case H5T_TIME: return "time";
        case H5T_STRING: return "string";
        case H5T_BITFIELD: return "bitfield";
        case H5T_REFERENCE: return "reference";
        case H5T_ENUM: return "enum";
        case H5T_VLEN: return "variable-length";
        case H5T_ARRAY: return "array";
        default: return "unknown-class";
    }
}

// The layout, external files and filters: where the bytes are and how they are encoded, checked
// before anything else (nothing here opens another file or reads raw data).
void check_storage(hid_t dcpl, const ExpectedDataset& expected, const std::string& where) {
    const std::string writes = "; expected its bytes inside the archive, contiguous" +
                               std::string(expected.zstd_level > 0 ? " or in zstd chunks" : "") +
                               " (what merge --format hdf5 writes)";
    const int external = H5Pget_external_count(dcpl);
    if (external != 0) {
        char name[512] = "?";
        off_t offset = 0;
        hsize_t size = 0;
        if (external > 0) H5Pget_external(dcpl, 0, sizeof name, name, &offset, &size);
        name[sizeof name - 1] = '\0';
        throw Error(where + ": its data is stored in the external file '" + name + "'" + writes);
    }
    switch (H5Pget_layout(dcpl)) {
        case H5D_CONTIGUOUS: return;
        case H5D_CHUNKED:
            if (expected.zstd_level > 0) return;
            throw Error(where + ": chunked, in an archive whose compression is none" + writes);
        case H5D_VIRTUAL:
            throw Error(where + ": a virtual dataset (its data mapped from other datasets or files)" + writes);
        case H5D_COMPACT: throw Error(where + ": compact storage (in the object header)" + writes);
        default: throw Error(where + ": an unknown storage layout" + writes);
    }
}

// A chunked dataset: chunks of whole rows, the one zstd filter at the archive's level.
int64_t check_chunks(hid_t dcpl, const std::vector<hsize_t>& dims, const ExpectedDataset& expected,
                     const std::string& where) {
    std::vector<hsize_t> chunk(dims.size() ? dims.size() : 1, 0);
    const int rank = H5Pget_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    std::vector<hsize_t> whole_rows = dims;
    if (!dims.empty()) whole_rows[0] = chunk[0];
    if (rank != static_cast<int>(dims.size()) || dims.empty() || chunk[0] < 1 || chunk[0] > dims[0] ||
        chunk != whole_rows)
        throw Error(where + ": chunks of " + (rank == static_cast<int>(dims.size()) ? dims_text(chunk) : "another rank") +
                    " in a dataspace of " + dims_text(dims) + "; expected chunks of whole rows (1.." +
                    (dims.empty() ? "0" : std::to_string(dims[0])) + " rows, the other dimensions whole)");
    const std::string filter = "; expected exactly the zstd filter " + std::to_string(kZstdFilterId) + " at level " +
                               std::to_string(expected.zstd_level) + " (the archive's compression)";
    const int filters = H5Pget_nfilters(dcpl);
    if (filters != 1) throw Error(where + ": " + std::to_string(filters) + " filters" + filter);
    unsigned flags = 0, values[4] = {0, 0, 0, 0};
    size_t count = 4;
    char name[64] = "";
    const H5Z_filter_t id = H5Pget_filter2(dcpl, 0, &flags, &count, values, sizeof name, name, nullptr);
    if (id != kZstdFilterId) throw Error(where + ": filter " + std::to_string(id) + filter);
    if (flags & H5Z_FLAG_OPTIONAL) throw Error(where + ": the zstd filter is optional (chunks may be stored raw)" + filter);
    if (count != 1 || values[0] != static_cast<unsigned>(expected.zstd_level))
        throw Error(where + ": zstd filter parameters " + (count ? std::to_string(values[0]) : "none") +
                    (count > 1 ? " and " + std::to_string(count - 1) + " more" : "") + filter);
    return static_cast<int64_t>(chunk[0]);
}

// Every byte stored: HDF5 gives fill values (zeros) for storage or chunks never written.
void check_allocated(hid_t dataset, const StoredDataset& stored, uint64_t nbytes, const std::string& where) {
    if (nbytes == 0) return;
    if (stored.chunk_rows == 0) {
        H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
        checked(H5Dget_space_status(dataset, &status), where + ": storage status");
        if (status != H5D_SPACE_STATUS_ALLOCATED)
            throw Error(where + ": never written (its storage is not allocated, HDF5 would read fill values); expected " +
                        std::to_string(nbytes) + " stored bytes");
        const hsize_t size = H5Dget_storage_size(dataset);
        if (size != nbytes)
            throw Error(where + ": " + std::to_string(size) + " bytes stored, expected " + std::to_string(nbytes));
        return;
    }
    const auto rows = static_cast<uint64_t>(stored.shape[0]), per_chunk = static_cast<uint64_t>(stored.chunk_rows);
    const uint64_t chunks = (rows + per_chunk - 1) / per_chunk;
    hsize_t written = 0;
    const H5Handle space = checked(H5Dget_space(dataset), H5Sclose, where + ": dataspace");  // 1.10.8 takes no H5S_ALL
    checked(H5Dget_num_chunks(dataset, space, &written), where + ": counting its chunks");
    if (written != chunks)
        throw Error(where + ": " + std::to_string(written) + " of its " + std::to_string(chunks) +
                    " chunks stored (the others never written, HDF5 would read fill values); expected all");
}

}  // namespace

std::string describe_hdf5_type(hid_t type) {
    const size_t size = H5Tget_size(type);
    const std::string bytes = std::to_string(size) + "-byte ";
    const H5T_class_t c = H5Tget_class(type);
    switch (c) {
        case H5T_INTEGER:
            return bytes + order_name(H5Tget_order(type)) + (H5Tget_sign(type) == H5T_SGN_2 ? " signed" : " unsigned") +
                   " integer";
        case H5T_FLOAT: {
            size_t sign = 0, exponent_at = 0, exponent_bits = 0, mantissa_at = 0, mantissa_bits = 0;
            H5Tget_fields(type, &sign, &exponent_at, &exponent_bits, &mantissa_at, &mantissa_bits);
            return bytes + order_name(H5Tget_order(type)) + " float (sign at bit " + std::to_string(sign) + ", " +
                   std::to_string(exponent_bits) + " exponent bits at " + std::to_string(exponent_at) + ", bias " +
                   std::to_string(H5Tget_ebias(type)) + ", " + std::to_string(mantissa_bits) + " mantissa bits at " +
                   std::to_string(mantissa_at) + ")";
        }
        case H5T_OPAQUE: {
            char* tag = H5Tget_tag(type);
            const std::string text = bytes + "opaque tagged '" + (tag ? tag : "") + "'";
            H5free_memory(tag);
            return text;
        }
        case H5T_COMPOUND: return bytes + "compound of " + std::to_string(H5Tget_nmembers(type)) + " members";
        default: return bytes + class_name(c);
    }
}

StoredDataset check_archive_dataset(hid_t dataset, const ExpectedDataset& expected, const std::string& where) {
    const H5Handle dcpl = checked(H5Dget_create_plist(dataset), H5Pclose, where + ": creation properties");
    check_storage(dcpl, expected, where);
    // The dataspace: the tensor's shape (a 0-d tensor a scalar), fixed.
    const H5Handle space = checked(H5Dget_space(dataset), H5Sclose, where + ": dataspace");
    const H5S_class_t kind = H5Sget_simple_extent_type(space);
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0))), max_dims(dims.size());
    if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), max_dims.data());
    StoredDataset stored;
    stored.shape = Shape(dims.begin(), dims.end());
    const bool want_scalar = expected.shape && expected.shape->empty();
    const std::string want_space = expected.shape ? (want_scalar ? "a scalar" : shape_to_string(*expected.shape))
                                                  : std::string("1-d");
    const std::string space_text = kind == H5S_NULL ? "a null dataspace" : kind == H5S_SCALAR ? "a scalar" : dims_text(dims);
    if (kind == H5S_NULL || kind == H5S_NO_CLASS || (kind == H5S_SCALAR) != want_scalar ||
        (expected.shape ? stored.shape != *expected.shape : rank != 1))
        throw Error(where + ": dataspace " + space_text + ", expected " + want_space);
    if (max_dims != dims)
        throw Error(where + ": an extendible dataspace (maximum " + dims_text(max_dims) + "), expected fixed " + space_text);
    // The type: exactly what vmerge writes for the dtype; HDF5 would convert anything else.
    const H5Handle type = checked(H5Dget_type(dataset), H5Tclose, where + ": type");
    const H5Handle want = hdf5_file_type(expected.dtype);
    if (H5Tequal(type, want) <= 0)
        throw Error(where + ": stored as " + describe_hdf5_type(type) + ", expected " + describe_hdf5_type(want) +
                    " (what vmerge writes for " + std::string(safetensors_name(expected.dtype)) + ")");
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) stored.chunk_rows = check_chunks(dcpl, dims, expected, where);
    else if (H5Pget_nfilters(dcpl) != 0) throw Error(where + ": contiguous with filters; expected none");
    check_allocated(dataset, stored, static_cast<uint64_t>(numel(stored.shape)) * element_size(expected.dtype), where);
    return stored;
}

}  // namespace vmerge
