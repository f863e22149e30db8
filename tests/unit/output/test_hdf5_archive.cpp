// The archive writer (output/hdf5/): chunk rows, and a one-process write/read round trip of an
// archive (sec2).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zstd.h>

#include "core/error.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "hdf5/archive_layout.h"
#include "output/hdf5/archive_chunks.h"
#include "output/hdf5/archive_writer.h"
#include "plan/rank_work.h"
#include "hdf5/zstd_samples.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::sample_bytes;

using testing::tensor;
TEST(ArchiveLayout, ChunkRows) {
    EXPECT_EQ(archive_chunk_rows(tensor("s", DType::F32, {})), 0);       // 0-d: contiguous
    EXPECT_EQ(archive_chunk_rows(tensor("e", DType::F32, {0, 4})), 0);   // empty: contiguous
    EXPECT_EQ(archive_chunk_rows(tensor("w", DType::BF16, {100, 512}), 4096), 4);
    EXPECT_EQ(archive_chunk_rows(tensor("w", DType::BF16, {3, 512}), 1 << 20), 3);  // at most the rows
    EXPECT_EQ(archive_chunk_rows(tensor("w", DType::F32, {10, 4096}), 100), 1);     // at least one row
}

// One process, no MPI: the writer uses the sec2 driver; what it wrote reads back bit for bit.
TEST(ArchiveRoundTrip, WritesAndReadsBackEveryDtypeLayout) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.h5";
    std::vector<OutputTensor> tensors = {tensor("model.embed.weight", DType::BF16, {37, 16}),
                                         tensor("model.norm.weight", DType::F16, {16}),
                                         tensor("model.scale", DType::F32, {}),
                                         tensor("model.empty", DType::F32, {0, 3}),
                                         tensor("model.ids", DType::I64, {5, 2})};
    std::vector<std::vector<unsigned char>> data;
    for (size_t i = 0; i < tensors.size(); ++i) data.push_back(sample_bytes(tensors[i].nbytes(), 100 + i));
    // bf16 specials survive as bits: NaN with a payload, -0, inf.
    const uint16_t specials[] = {0x7FC1, 0x8000, 0x7F80, 0xFF81};
    std::memcpy(data[0].data(), specials, sizeof specials);
    for (int level : {0, 3}) {
        std::filesystem::remove(path);
        std::vector<int64_t> chunk_rows;
        for (const auto& t : tensors) chunk_rows.push_back(level ? archive_chunk_rows(t, 64) : 0);
        EXPECT_EQ(chunk_rows[0], level ? 2 : 0);
        {
            ArchiveWriter writer(path, tensors, chunk_rows, level);
            EXPECT_FALSE(writer.parallel());
            for (size_t t = 0; t < tensors.size(); ++t) {
                if (tensors[t].nbytes() == 0) continue;
                const int64_t rows = row_count(tensors[t]);
                const int64_t half = rows / 2;
                const uint64_t rb = row_bytes(tensors[t]);
                writer.write_rows(t, 0, half, data[t].data());
                writer.write_rows(t, half, rows, data[t].data() + half * rb);
            }
            writer.add_file("config.json", "{\"a\": 1}\n");
            writer.add_file("sub/empty.txt", "");
            writer.write_index({1, {}, level ? "zstd:3" : "none"});
            writer.close();
        }
        // The index above claims 1 byte and lists no tensor: the reader refuses the mismatch ...
        EXPECT_THROW(ArchiveReader{path}, Error);
        std::filesystem::remove(path);
        {
            ArchiveWriter writer(path, tensors, chunk_rows, level);
            uint64_t total = 0;
            std::vector<std::string> names;
            for (size_t t = 0; t < tensors.size(); ++t) {
                names.push_back(tensors[t].name);
                total += tensors[t].nbytes();
                if (tensors[t].nbytes()) writer.write_rows(t, 0, row_count(tensors[t]), data[t].data());
            }
            writer.add_file("config.json", "{\"a\": 1}\n");
            writer.add_file("sub/empty.txt", "");
            writer.write_index({total, names, level ? "zstd:3" : "none"});
            writer.close();
        }
        // ... and reads a consistent archive back.
        ArchiveReader reader(path);
        ASSERT_EQ(reader.tensors().size(), tensors.size());
        EXPECT_EQ(reader.compression(), level ? "zstd:3" : "none");
        for (size_t t = 0; t < tensors.size(); ++t) {
            const ArchiveTensor& a = reader.tensors()[t];
            EXPECT_EQ(a.name, tensors[t].name);
            EXPECT_EQ(a.dtype, tensors[t].dtype);
            EXPECT_EQ(a.shape, tensors[t].shape);
            EXPECT_EQ(a.compressed, level > 0 && chunk_rows[t] > 0);
            if (!tensors[t].nbytes()) continue;
            std::vector<unsigned char> back(tensors[t].nbytes());
            reader.read_rows(t, 0, row_count(tensors[t]), back.data());
            EXPECT_EQ(back, data[t]) << tensors[t].name;
        }
        const auto files = reader.files();
        ASSERT_EQ(files.size(), 2u);
        EXPECT_EQ(files[0].first, "config.json");
        EXPECT_EQ(files[0].second, "{\"a\": 1}\n");
        EXPECT_EQ(files[1].first, "sub/empty.txt");
        EXPECT_EQ(files[1].second, "");
    }
}

}  // namespace
}  // namespace vmerge

namespace vmerge {
namespace {

// A large model's tensor_names (here 2000 names, about 150 KB) is beyond HDF5's 64 KiB limit of
// compact attributes: it needs the dense attribute storage of the 1.8+ file format.
TEST(ArchiveRoundTrip, TensorNamesBeyondCompactAttributeLimit) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/model.h5";
    std::vector<OutputTensor> tensors;
    std::vector<std::string> names;
    for (int i = 0; i < 2000; ++i) {
        tensors.push_back(tensor("model.layers." + std::to_string(i) + ".mlp.experts_projection_with_a_long_name.weight",
                                 DType::F32, {1}));
        names.push_back(tensors.back().name);
    }
    {
        ArchiveWriter writer(path, tensors, std::vector<int64_t>(tensors.size(), 0), 0);
        const float one = 1.0f;
        for (size_t t = 0; t < tensors.size(); ++t) writer.write_rows(t, 0, 1, &one);
        writer.write_index({tensors.size() * 4, names, "none"});
        writer.close();
    }
    ArchiveReader reader(path);
    ASSERT_EQ(reader.tensors().size(), tensors.size());
    EXPECT_EQ(reader.tensors().back().name, names.back());
}

}  // namespace
}  // namespace vmerge
