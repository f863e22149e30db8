// Unit tests for reading an HDF5 archive as untrusted input (formats/hdf5_archive/): the names of
// stored types, and ArchiveReader refusing datasets vmerge does not write (a good archive written by
// ArchiveWriter, one dataset then replaced through the HDF5 C API). The corpus
// (tests/corpus/cases_hdf5.py) runs the same classes end to end with archives written by h5py.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <zstd.h>

#include "core/error.h"
#include "formats/hdf5_archive/archive_dataset_check.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "hdf5/h5z_zstd_filter.h"
#include "hdf5/hdf5_dtype.h"
#include "hdf5/zstd_codec.h"
#include "output/hdf5/archive_writer.h"
#include "plan/rank_work.h"
#include "hdf5/zstd_samples.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::frame_of;
using testing::frame_claiming;

using testing::contains;
using testing::tensor;
TEST(Hdf5TypeText, NamesClassSizeOrderAndFields) {
    EXPECT_EQ(describe_hdf5_type(H5T_IEEE_F32BE),
              "4-byte big-endian float (sign at bit 31, 8 exponent bits at 23, bias 127, 23 mantissa bits at 0)");
    EXPECT_EQ(describe_hdf5_type(hdf5_file_type(DType::BF16)),
              "2-byte little-endian float (sign at bit 15, 8 exponent bits at 7, bias 127, 7 mantissa bits at 0)");
    EXPECT_EQ(describe_hdf5_type(H5T_STD_I32LE), "4-byte little-endian signed integer");
    EXPECT_EQ(describe_hdf5_type(hdf5_file_type(DType::F8_E4M3)), "1-byte opaque tagged 'float8_e4m3fn'");
}

// A good archive of one F32 tensor "w" [4, 2] (zstd chunks of 2 rows when `level` > 0), then
// `damage` run on the open file (read-write).
constexpr const char* kTensor = "model.w";
constexpr const char* kDataset = "model/w";

void write_archive(const std::string& path, int level) {
    const std::vector<OutputTensor> tensors = {tensor(kTensor, DType::F32, {4, 2})};
    ArchiveWriter writer(path, tensors, {level ? 2 : 0}, level);
    const float values[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    writer.write_rows(0, 0, 4, values);
    writer.write_index({32, {kTensor}, level ? "zstd:" + std::to_string(level) : "none"});
    writer.close();
}

void string_attribute(hid_t object, const char* name, const std::string& value) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attr = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* p = value.c_str();
    H5Awrite(attr, type, &p);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
}

// Replaces the tensor's dataset by one made by `make(file, name, space)` (it returns the open
// dataset), with vmerge's attributes.
void replace_dataset(const std::string& path, const std::function<hid_t(hid_t, const char*, hid_t)>& make) {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    ASSERT_GE(H5Ldelete(file, kDataset, H5P_DEFAULT), 0);
    const hsize_t dims[2] = {4, 2};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t dataset = make(file, kDataset, space);
    ASSERT_GE(dataset, 0);
    string_attribute(dataset, "hf_name", kTensor);
    string_attribute(dataset, "dtype", "F32");
    const hsize_t two = 2;
    const hid_t shape_space = H5Screate_simple(1, &two, nullptr);
    const hid_t shape = H5Acreate2(dataset, "shape", H5T_STD_I64LE, shape_space, H5P_DEFAULT, H5P_DEFAULT);
    const int64_t shape_values[2] = {4, 2};
    H5Awrite(shape, H5T_NATIVE_INT64, shape_values);
    H5Aclose(shape);
    H5Sclose(shape_space);
    H5Dclose(dataset);
    H5Sclose(space);
    H5Fclose(file);
}

std::string reader_error(const std::string& path) {
    try {
        ArchiveReader reader(path);
        std::vector<float> out(8);
        reader.read_rows(0, 0, 4, out.data());
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

hid_t chunked(hid_t file, const char* name, hid_t space, std::vector<std::vector<unsigned char>> frames) {
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk[2] = {2, 2};
    H5Pset_chunk(dcpl, 2, chunk);
    const unsigned level = 3;
    H5Pset_filter(dcpl, kZstdFilterId, H5Z_FLAG_MANDATORY, 1, &level);
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t dataset = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, lcpl, dcpl, H5P_DEFAULT);
    for (size_t i = 0; i < frames.size(); ++i) {
        const hsize_t offset[2] = {2 * i, 0};
        H5Dwrite_chunk(dataset, H5P_DEFAULT, 0, offset, frames[i].size(), frames[i].data());
    }
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    return dataset;
}

TEST(ArchiveUntrusted, GoodArchivesReadBack) {
    testing::TempDir dir;
    for (int level : {0, 3}) {
        const std::string path = dir.path() + "/model" + std::to_string(level) + ".h5";
        write_archive(path, level);
        ArchiveReader reader(path);
        std::vector<float> out(8);
        reader.read_rows(0, 1, 4, out.data());  // rows 1..3: the first chunk only in part
        EXPECT_EQ(out, (std::vector<float>{3, 4, 5, 6, 7, 8, 0, 0}));
    }
}

TEST(ArchiveUntrusted, RefusesStorageOutsideTheFile) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.h5";
    const std::string secret = dir.path() + "/secret";
    dir.touch("secret", std::string(32, 's'));
    write_archive(path, 0);
    replace_dataset(path, [&](hid_t file, const char* name, hid_t space) {
        const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_external(dcpl, secret.c_str(), 0, 32);
        const hid_t d = H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Pclose(dcpl);
        return d;
    });
    EXPECT_EQ(reader_error(path), path + " /model/w: its data is stored in the external file '" + secret +
                                      "'; expected its bytes inside the archive, contiguous (what merge --format "
                                      "hdf5 writes)");
}

TEST(ArchiveUntrusted, RefusesBytesNeverWritten) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.h5";
    write_archive(path, 0);
    replace_dataset(path, [](hid_t file, const char* name, hid_t space) {
        return H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    });
    EXPECT_EQ(reader_error(path), path + " /model/w: never written (its storage is not allocated, HDF5 would read "
                                         "fill values); expected 32 stored bytes");
}

TEST(ArchiveUntrusted, RefusesAnotherByteOrder) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.h5";
    write_archive(path, 0);
    replace_dataset(path, [](hid_t file, const char* name, hid_t space) {
        const hid_t d = H5Dcreate2(file, name, H5T_IEEE_F32BE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        const float values[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
        return d;
    });
    EXPECT_EQ(reader_error(path),
              path + " /model/w: stored as 4-byte big-endian float (sign at bit 31, 8 exponent bits at 23, bias 127, "
                     "23 mantissa bits at 0), expected 4-byte little-endian float (sign at bit 31, 8 exponent bits at "
                     "23, bias 127, 23 mantissa bits at 0) (what vmerge writes for F32)");
}

TEST(ArchiveUntrusted, RefusesChunksVmergeDoesNotWrite) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.h5";
    const std::vector<unsigned char> rows(16, 0);
    struct Case {
        std::vector<std::vector<unsigned char>> frames;
        std::string error;
    };
    const std::vector<Case> cases = {
        {{frame_of(rows), frame_of(std::vector<unsigned char>(8, 0))},
         " /model/w: the chunk at row 2: zstd: the frame records 8 decompressed bytes, expected exactly 16 (the "
         "chunk's size)"},
        {{frame_claiming(1ull << 30), frame_of(rows)},
         " /model/w: the chunk at row 0: zstd: the frame records 1073741824 decompressed bytes, expected exactly 16"},
        {{frame_of(rows)},
         " /model/w: 1 of its 2 chunks stored (the others never written, HDF5 would read fill values); expected all"},
    };
    for (const Case& c : cases) {
        std::filesystem::remove(path);
        write_archive(path, 3);
        replace_dataset(path, [&](hid_t file, const char* name, hid_t space) { return chunked(file, name, space, c.frames); });
        EXPECT_TRUE(contains(reader_error(path), path + c.error)) << reader_error(path);
    }
}

}  // namespace
}  // namespace vmerge
