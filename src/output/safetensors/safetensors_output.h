#pragma once
#include <map>
#include <memory>

#include "output/output_format.h"
#include "output/safetensors/safetensors_folder.h"

namespace vmerge {

// --format safetensors: a Hugging Face folder of model-0000N-of-0000M.safetensors shards (or
// one model.safetensors), its index and checksums. Each rank pwrites its row blocks at their
// planned offsets and journals them (--resume).
class SafetensorsOutput final : public OutputFormat {
public:
    explicit SafetensorsOutput(OutputOptions options) : OutputFormat(std::move(options)) {}

    void plan(TensorMapping& mapping) override;
    const OutputLayout& layout() const override { return layout_; }
    StagingState prepare(const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) override;
    void open() override;
    std::vector<WriteTask> tasks() const override { return work_; }
    void write(const RowBlock& block) override;
    bool takes_block_hashes() const override { return true; }
    bool holds(size_t tensor, int64_t row_begin, int64_t row_end) override;
    void finish() override;
    std::string reuse_state() const override;
    std::vector<std::string> complete_reuse(const std::vector<std::string>& states) override;
    void abandon() override;
    std::vector<std::string> commit() override;

private:
    const std::vector<OutputTensor>* tensors_ = nullptr;
    OutputLayout layout_;
    std::vector<WriteTask> work_;
    std::map<BlockKey, WrittenBlock> done_;  // --resume: what the interrupted run wrote
    std::unique_ptr<PreviousOutput> previous_;  // --reuse
    std::unique_ptr<JournalWriter> journal_;
    std::unique_ptr<OutputWriter> writer_;
};

}  // namespace vmerge
