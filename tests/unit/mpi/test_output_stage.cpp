// The write stage (mpi/output_stage.h): its calls into a format (a fake one, one-rank Comm), and an
// archive written by Hdf5Output through it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "exec/copy_executor.h"
#include "formats/hdf5_archive/archive_reader.h"
#include "hdf5/archive_layout.h"
#include "output/registry.h"
#include "output_stage.h"
#include "single_rank_comm.h"
#include "test_support.h"

namespace vmerge {
namespace {

// Bytes in memory as the executor's source.
class BytesSource final : public SourceReader {
public:
    explicit BytesSource(std::vector<unsigned char> bytes) : bytes_(std::move(bytes)) {}
    void read_exact(uint64_t offset, void* out, uint64_t length, const char*) const override {
        std::memcpy(out, bytes_.data() + offset, length);
    }

private:
    std::vector<unsigned char> bytes_;
};

// One F32 tensor "w" of `rows` x 2, copied from a source of bytes 0, 1, 2, ...
TensorMapping one_tensor_mapping(int64_t rows) {
    TensorMapping mapping;
    TensorRef source;
    source.dtype = DType::F32;
    source.shape = {rows, 2};
    source.stride = contiguous_strides(source.shape);
    source.storage.file = "bytes";
    mapping.sources.push_back(source);
    OutputTensor t = testing::tensor("model.w.weight", DType::F32, {rows, 2});
    t.copies.push_back({0, {0, 0}, {0, 0}, {rows, 2}});
    mapping.tensors.push_back(t);
    return mapping;
}

SourceOpener bytes_opener(size_t n) {
    return [n](const std::string&) -> std::unique_ptr<SourceReader> {
        std::vector<unsigned char> bytes(n);
        for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i);
        return std::make_unique<BytesSource>(std::move(bytes));
    };
}

// Records what the write stage asks of it.
class RecordingFormat final : public OutputFormat {
public:
    explicit RecordingFormat(OutputOptions options) : OutputFormat(std::move(options)) {}
    mutable std::vector<std::string> calls;  // check() is const
    std::vector<unsigned char> written;

    void check(const TensorMapping&) const override { calls.push_back("check"); }
    void plan(TensorMapping& mapping) override {
        calls.push_back("plan");
        layout_.total_size = mapping.tensors[0].nbytes();
        written.resize(layout_.total_size);
    }
    const OutputLayout& layout() const override { return layout_; }
    StagingState prepare(const ResumeIdentity&, const std::vector<InputFolder>&) override {
        calls.push_back("prepare");
        return {};
    }
    std::vector<std::string> gather_files() override {
        calls.push_back("gather_files");
        return {"a note"};
    }
    void open() override { calls.push_back("open"); }
    std::vector<WriteTask> tasks() const override { return {{0, 0, 2}, {0, 2, 4}}; }
    void write(const RowBlock& b) override {
        std::memcpy(written.data() + b.row_begin * 8, b.data, b.size);
    }
    void task_done(const WriteTask& task) override { calls.push_back("task_done " + std::to_string(task.row_end)); }
    void finish() override { calls.push_back("finish"); }
    void abandon() override { calls.push_back("abandon"); }
    std::vector<std::string> commit() override {
        calls.push_back("commit");
        return {};
    }

private:
    OutputLayout layout_;
};

TEST(OutputStage, CallsTheFormatInItsOrder) {
    SingleRankComm comm;
    Options o;
    o.output.target = "unused";
    RecordingFormat format(output_options(o, comm, 1 << 20));
    TensorMapping mapping = one_tensor_mapping(4);
    OutputRun run;
    run.sources = bytes_opener(32);
    run.identity = [](const OutputLayout&) { return ResumeIdentity{}; };
    std::ostringstream out, err;
    write_output(format, mapping, run, o, comm, out, err);
    EXPECT_EQ(format.calls, (std::vector<std::string>{"check", "plan", "prepare", "gather_files", "open", "task_done 2",
                                                      "task_done 4", "finish", "commit"}));
    EXPECT_EQ(out.str(), "vmerge: a note\n");
    std::vector<unsigned char> expected(32);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<unsigned char>(i);
    EXPECT_EQ(format.written, expected);
}

// --format hdf5 through the write stage, one process (sec2): the archive holds the rows and the
// generated files, and the staging folder is renamed into place.
TEST(OutputStage, Hdf5OutputWritesTheArchive) {
    testing::TempDir dir;
    SingleRankComm comm;
    Options o;
    o.output.target = dir.path() + "/out";
    o.output.zstd_level = 3;
    o.output.chunk_bytes = 16;  // two rows per chunk
    OutputOptions options = output_options(o, comm, 1 << 20);
    options.generated = {{"config.json", "{}\n"}};
    const auto format = make_output_format("hdf5", std::move(options));
    EXPECT_FALSE(format->options().resumable);
    TensorMapping mapping = one_tensor_mapping(5);
    OutputRun run;
    run.sources = bytes_opener(40);
    run.identity = [](const OutputLayout&) { return ResumeIdentity{}; };
    std::ostringstream out, err;
    write_output(*format, mapping, run, o, comm, out, err);
    EXPECT_EQ(mapping.tensors[0].row_align, 2);  // chunks of 2 rows, one writer each
    EXPECT_FALSE(std::filesystem::exists(staging_path(o.output.target)));
    ArchiveReader reader(o.output.target + "/" + kArchiveFileName);
    ASSERT_EQ(reader.tensors().size(), 1u);
    EXPECT_EQ(reader.tensors()[0].chunk_rows, 2);
    std::vector<unsigned char> back(40), expected(40);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<unsigned char>(i);
    reader.read_rows(0, 0, 5, back.data());
    EXPECT_EQ(back, expected);
    EXPECT_EQ(reader.files(), (std::vector<std::pair<std::string, std::string>>{{"config.json", "{}\n"}}));
}

}  // namespace
}  // namespace vmerge
