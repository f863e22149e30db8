#pragma once
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/tensor_mapping.h"
#include "hdf5/hdf5_handle.h"

namespace vmerge {

// What one dataset of model.h5 must be: exactly what ArchiveWriter makes (docs/hdf5.md, "An
// archive is input like any other"). An archive is untrusted input: HDF5 can keep a dataset's
// bytes in another file (external storage, virtual datasets), give fill values for bytes never
// written, convert big-endian or other float layouts on the fly, and decode a chunk to any size
// a frame claims. ArchiveReader checks every dataset with check_archive_dataset before reading a
// byte of it, and decodes chunks itself (zstd_decode_chunk), so none of that reaches a merge.
struct ExpectedDataset {
    DType dtype = DType::U8;     // stored as hdf5_file_type(dtype), exactly (class, size, byte order, fields)
    std::optional<Shape> shape;  // none: 1-d of any length (an HF file kept in the archive)
    int zstd_level = 0;          // > 0: may be chunked by whole rows with the zstd filter at this level
};

// How a checked dataset is stored.
struct StoredDataset {
    Shape shape;
    int64_t chunk_rows = 0;  // rows per chunk; 0: contiguous
};

// Throws one Error "<where>: <what the dataset is>; expected <what vmerge writes>" for: storage
// outside the file (external files, virtual datasets) or compact; a layout other than contiguous
// or (compressed archives) chunked by whole rows through the one zstd filter; a dataspace or type
// other than the expected one (a big-endian or differently laid out type included); bytes never
// written (storage or chunks not allocated). `where` names the archive and the dataset path.
StoredDataset check_archive_dataset(hid_t dataset, const ExpectedDataset& expected, const std::string& where);

// "4-byte big-endian float (sign at bit 31, 8 exponent bits at 23, bias 127, 23 mantissa bits)",
// "8-byte little-endian signed integer", ...: an HDF5 type in a user's words.
std::string describe_hdf5_type(hid_t type);

}  // namespace vmerge
