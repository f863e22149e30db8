// An archive read back through the copy executor (formats/hdf5_archive/archive_source.h, the
// archive -> HF conversion's source).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "exec/copy_executor.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "formats/hdf5_archive/archive_source.h"
#include "hdf5/archive_layout.h"
#include "output/hdf5/archive_writer.h"
#include "test_support.h"

namespace vmerge {
namespace {

// Writes an archive (compressed in chunks of 2 rows, and contiguous), then reads it back with
// the executor through archive_source_opener: the bytes come back as written.
TEST(OutputFormats, ArchiveIsASourceOfTheExecutor) {
    testing::TempDir dir;
    const std::string path = dir.path() + "/" + kArchiveFileName;
    std::vector<OutputTensor> tensors = {testing::tensor("model.a.weight", DType::BF16, {7, 3}),
                                         testing::tensor("model.b.bias", DType::F32, {5})};
    std::vector<std::vector<unsigned char>> data;
    for (const auto& t : tensors) {
        data.emplace_back(t.nbytes());
        for (size_t i = 0; i < data.back().size(); ++i) data.back()[i] = static_cast<unsigned char>(i * 7 + data.size());
    }
    {
        ArchiveWriter writer(path, tensors, {2, 0}, 3);
        for (size_t t = 0; t < tensors.size(); ++t) writer.write_rows(t, 0, tensors[t].shape[0], data[t].data());
        writer.write_index({tensors[0].nbytes() + tensors[1].nbytes(), {tensors[0].name, tensors[1].name}, "zstd:3"});
        writer.close();
    }
    ArchiveReader reader(path);
    const TensorMapping mapping = archive_source_mapping(reader.tensors());
    ASSERT_EQ(mapping.tensors.size(), 2u);
    EXPECT_EQ(mapping.tensors[0].row_align, 2);  // whole chunks per block
    EXPECT_EQ(mapping.tensors[1].row_align, 1);
    CopyExecutor executor(mapping, 1 << 20);
    executor.read_sources_with(archive_source_opener(reader));
    std::vector<std::vector<unsigned char>> back = {std::vector<unsigned char>(data[0].size()),
                                                    std::vector<unsigned char>(data[1].size())};
    executor.run({{0, 0, 3}, {0, 3, 7}, {1, 0, 5}},
                 [&](const RowBlock& b) {
                     std::memcpy(back[b.tensor].data() + b.row_begin * static_cast<int64_t>(row_bytes(tensors[b.tensor])),
                                 b.data, b.size);
                 });
    EXPECT_EQ(back, data);
}

}  // namespace
}  // namespace vmerge
