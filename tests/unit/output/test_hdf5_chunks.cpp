// Unit tests for the compressed-chunk path of hdf5/: chunk parcels, the chunk compressor (frames
// an independent zstd decodes to the chunk's rows, the last chunk zero-padded), and raw chunk
// writes that store exactly what HDF5's own filter pipeline stores.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zstd.h>

#include "core/error.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "output/hdf5/archive_writer.h"
#include "output/hdf5/chunk_compressor.h"
#include "output/hdf5/chunk_parcel.h"
#include "plan/rank_work.h"
#include "test_support.h"

namespace vmerge {
namespace {

std::vector<unsigned char> bytes_of(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> out(n);
    for (size_t i = 0; i < n; ++i) out[i] = i % 3 == 0 ? static_cast<unsigned char>(rng()) : static_cast<unsigned char>(i / 64);
    return out;
}

TEST(ChunkParcel, RecordsComeBackInOrder) {
    ChunkParcel parcel;
    const unsigned char frame[] = {1, 2, 3, 4, 5};
    parcel.add(ChunkParcel::Kind::Frame, 7, 12, 18, frame, sizeof frame);
    parcel.add(ChunkParcel::Kind::Rows, 2, 0, 0, nullptr, 0);
    parcel.add(ChunkParcel::Kind::Rows, 3, 4, 5, frame + 1, 2);
    const auto records = ChunkParcel::records(parcel.bytes());
    ASSERT_EQ(records.size(), 3u);
    EXPECT_EQ(records[0].kind, ChunkParcel::Kind::Frame);
    EXPECT_EQ(records[0].tensor, 7u);
    EXPECT_EQ(records[0].row_begin, 12);
    EXPECT_EQ(records[0].row_end, 18);
    EXPECT_EQ(std::vector<unsigned char>(records[0].data, records[0].data + records[0].size),
              std::vector<unsigned char>(frame, frame + 5));
    EXPECT_EQ(records[1].size, 0u);
    EXPECT_EQ(records[2].kind, ChunkParcel::Kind::Rows);
    EXPECT_EQ(records[2].data[0], 2);
    EXPECT_EQ(records[2].size, 2u);
    // 5 words of header per record, then the bytes.
    EXPECT_EQ(parcel.bytes().size(), 3 * 40u + 5 + 2);
}

TEST(ChunkParcel, RefusesATruncatedParcel) {
    ChunkParcel parcel;
    const unsigned char frame[8] = {};
    parcel.add(ChunkParcel::Kind::Frame, 0, 0, 1, frame, sizeof frame);
    std::vector<unsigned char> cut(parcel.bytes().begin(), parcel.bytes().end() - 1);
    EXPECT_THROW(ChunkParcel::records(cut), Error);
    cut.resize(20);
    EXPECT_THROW(ChunkParcel::records(cut), Error);
}

// 10 rows of 12 bytes in chunks of 4 rows: frames for rows 0..4, 4..8 and 8..10 (the last one
// padded to 4 rows with zeros), each one zstd frame with its content size.
TEST(ChunkCompressor, FramesAreWholeZeroPaddedChunks) {
    const ChunkGeometry g{"model.w", 12, 4, 10};
    const auto data = bytes_of(10 * 12, 5);
    ChunkCompressor compressor(3);
    std::vector<std::pair<int64_t, int64_t>> chunks;
    compressor.compress(g, 0, 10, data.data(), data.size(),
                        [&](int64_t begin, int64_t end, const unsigned char* frame, size_t size) {
                            chunks.emplace_back(begin, end);
                            ASSERT_EQ(ZSTD_getFrameContentSize(frame, size), 48u);
                            std::vector<unsigned char> back(48);
                            ASSERT_EQ(ZSTD_decompress(back.data(), back.size(), frame, size), 48u);
                            std::vector<unsigned char> expected(48, 0);
                            std::memcpy(expected.data(), data.data() + begin * 12, static_cast<size_t>(end - begin) * 12);
                            EXPECT_EQ(back, expected) << "chunk at row " << begin;
                            // The same bytes as the one-shot API (what the HDF5 filter calls).
                            std::vector<unsigned char> oneshot(ZSTD_compressBound(48));
                            const size_t n = ZSTD_compress(oneshot.data(), oneshot.size(), expected.data(), 48, 3);
                            EXPECT_EQ(std::vector<unsigned char>(frame, frame + size),
                                      std::vector<unsigned char>(oneshot.begin(), oneshot.begin() + n));
                        });
    EXPECT_EQ(chunks, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 8}, {8, 10}}));
}

TEST(ChunkCompressor, RefusesRowsThatAreNotWholeChunks) {
    const ChunkGeometry g{"model.w", 12, 4, 10};
    const auto data = bytes_of(10 * 12, 5);
    ChunkCompressor compressor(3);
    const auto none = [](int64_t, int64_t, const unsigned char*, size_t) {};
    // Starts inside a chunk; ends inside one that is not the last; the byte count disagrees.
    EXPECT_TRUE(testing::contains(testing::error_of([&] { compressor.compress(g, 2, 4, data.data(), 24, none); }),
                                  "model.w rows 2..4"));
    EXPECT_THROW(compressor.compress(g, 0, 6, data.data(), 72, none), Error);
    EXPECT_THROW(compressor.compress(g, 0, 4, data.data(), 47, none), Error);
}

// A tensor whose chunks are written raw (write_chunk, frames from ChunkCompressor, in any order)
// and the same tensor written through HDF5's filter pipeline (write_rows) store the same chunk
// bytes, the zero-padded edge chunk included, and read back the same.
TEST(ChunkCompressor, RawChunksAreWhatTheFilterStores) {
    testing::TempDir dir;
    const std::vector<OutputTensor> tensors = {testing::tensor("model.a.weight", DType::BF16, {7, 5}),
                                               testing::tensor("model.b.weight", DType::F32, {5, 3})};
    const std::vector<int64_t> chunk_rows = {3, 4};  // edge chunks of 1 row each
    std::vector<std::vector<unsigned char>> data;
    for (size_t t = 0; t < tensors.size(); ++t) data.push_back(bytes_of(tensors[t].nbytes(), 9 + t));
    const auto write = [&](const std::string& path, bool raw) {
        ArchiveWriter writer(path, tensors, chunk_rows, 3);
        ChunkCompressor compressor(3);
        for (size_t t = tensors.size(); t-- > 0;) {  // the later tensor first: order does not matter
            const int64_t rows = row_count(tensors[t]);
            if (!raw) {
                writer.write_rows(t, 0, rows, data[t].data());
                continue;
            }
            const ChunkGeometry g{tensors[t].name, row_bytes(tensors[t]), chunk_rows[t], rows};
            compressor.compress(g, 0, rows, data[t].data(), data[t].size(),
                                [&](int64_t row, int64_t, const unsigned char* frame, size_t size) {
                                    writer.write_chunk(t, row, frame, size);
                                });
        }
        writer.write_index({tensors[0].nbytes() + tensors[1].nbytes(), {tensors[0].name, tensors[1].name}, "zstd:3"});
        writer.close();
    };
    write(dir.path() + "/filtered.h5", false);
    write(dir.path() + "/raw.h5", true);
    const auto chunks_of = [](const std::string& path, const char* dataset, int count) {
        const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
        const hid_t ds = H5Dopen2(file, dataset, H5P_DEFAULT);
        const hid_t space = H5Dget_space(ds);  // 1.10.8 takes no H5S_ALL here
        hsize_t stored = 0;
        EXPECT_GE(H5Dget_num_chunks(ds, space, &stored), 0);
        EXPECT_EQ(stored, static_cast<hsize_t>(count));
        std::vector<std::vector<unsigned char>> out;
        for (int i = 0; i < count; ++i) {
            hsize_t offset[2] = {static_cast<hsize_t>(i), 0}, size = 0;
            haddr_t address = 0;
            unsigned mask = 99;
            EXPECT_GE(H5Dget_chunk_info(ds, space, static_cast<hsize_t>(i), offset, &mask, &address, &size), 0);
            EXPECT_EQ(mask, 0u);
            std::vector<unsigned char> bytes(size);
            uint32_t filters = 0;
            EXPECT_GE(H5Dread_chunk(ds, H5P_DEFAULT, offset, &filters, bytes.data()), 0);
            out.push_back(bytes);
        }
        H5Sclose(space);
        H5Dclose(ds);
        H5Fclose(file);
        return out;
    };
    EXPECT_EQ(chunks_of(dir.path() + "/raw.h5", "model/a/weight", 3), chunks_of(dir.path() + "/filtered.h5", "model/a/weight", 3));
    EXPECT_EQ(chunks_of(dir.path() + "/raw.h5", "model/b/weight", 2), chunks_of(dir.path() + "/filtered.h5", "model/b/weight", 2));
    ArchiveReader reader(dir.path() + "/raw.h5");
    for (size_t t = 0; t < tensors.size(); ++t) {
        std::vector<unsigned char> back(tensors[t].nbytes());
        reader.read_rows(t, 0, row_count(tensors[t]), back.data());
        EXPECT_EQ(back, data[t]) << tensors[t].name;
    }
}

}  // namespace
}  // namespace vmerge
