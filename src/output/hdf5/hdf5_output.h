#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "output/hdf5/archive_writer.h"
#include "output/output_format.h"

namespace vmerge {

// --format hdf5: the merge as one <target_dir>/model.h5 (docs/hdf5.md), every rank writing its
// share through parallel HDF5, plus the HF files inside it. Compressed datasets are written in
// collective rounds: every rank joins every round, with an empty piece once it has nothing left;
// the executor gets those pieces as tasks, the sink gathers a piece's blocks and task_done
// writes it (HDF5 is only called on the executor's own thread under MPI). A quantized weight's
// scales and zero points come with its blocks: they are stored unchunked (independent writes,
// no rounds; they are small) and written in task_done after the weight's piece.
class Hdf5Output final : public OutputFormat {
public:
    explicit Hdf5Output(OutputOptions options);
    ~Hdf5Output() override;

    void check_adapter(const std::string& local_dir, bool unfolded_adapter) const override;
    void check(const TensorMapping& mapping) const override;
    void plan(TensorMapping& mapping) override;
    const OutputLayout& layout() const override { return layout_; }
    StagingState prepare(const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) override;
    std::vector<std::string> gather_files() override;
    void open() override;
    std::vector<WriteTask> tasks() const override;
    uint64_t executor_memory() const override;
    void write(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size) override;
    void task_done(const WriteTask& task) override;
    void finish() override;
    void abandon() override;
    std::vector<std::string> commit() override;
    bool has_summary() const override { return true; }
    std::vector<std::string> summary(double seconds, double copy_seconds) const override;
    bool collective() const override { return true; }

private:
    const std::vector<OutputTensor>* tensors_ = nullptr;
    std::vector<int64_t> chunk_rows_;
    OutputLayout layout_;
    std::vector<WriteTask> work_;                 // this rank's share of the plan
    std::vector<std::vector<WriteTask>> pieces_;  // ... in pieces of whole chunks, by tensor
    std::vector<size_t> rounds_;                  // collective writes per compressed tensor
    std::vector<std::pair<std::string, std::string>> files_;
    std::unique_ptr<ArchiveWriter> writer_;
    std::vector<unsigned char> piece_;  // the blocks of the piece being gathered
    struct DerivedRows {                // scale or zero-point rows that came with the piece
        size_t tensor;
        int64_t row_begin, row_end;
        std::vector<unsigned char> data;
    };
    std::vector<DerivedRows> derived_;
};

}  // namespace vmerge
