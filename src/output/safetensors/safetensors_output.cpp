#include "output/safetensors/safetensors_output.h"
#include "output/safetensors/safetensors_layout.h"

namespace vmerge {

void SafetensorsOutput::plan(TensorMapping& mapping) {
    tensors_ = &mapping.tensors;
    layout_ = plan_safetensors_layout(mapping.tensors, options_.max_shard_size);
    work_ = plan_rank_work(mapping.tensors, layout_, options_.ranks).at(options_.rank);
}

StagingState SafetensorsOutput::prepare(const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) {
    if (!options_.reuse.empty()) check_reusable(options_.reuse, options_.target);
    return prepare_staging(options_.target, options_.force, options_.resume, options_.restart, layout_, identity, inputs);
}

void SafetensorsOutput::open() {
    const std::string staging = staging_path(options_.target);
    if (options_.resume) done_ = blocks_by_key(read_journals(staging));
    if (!options_.reuse.empty()) previous_ = std::make_unique<PreviousOutput>(options_.reuse, staging, layout_);
    journal_ = std::make_unique<JournalWriter>(staging, options_.rank);
    writer_ = std::make_unique<OutputWriter>(staging, *tensors_, layout_, journal_.get(),
                                             options_.page_cache == PageCachePolicy::Evict, previous_.get());
}

void SafetensorsOutput::write(const RowBlock& b) {
    writer_->write(b.tensor, b.row_begin, b.row_end, b.data, b.size, b.xxh64);
}

bool SafetensorsOutput::holds(size_t tensor, int64_t row_begin, int64_t row_end) {
    auto it = done_.find({tensor, row_begin, row_end});
    return it != done_.end() && writer_->holds(it->second);
}

void SafetensorsOutput::finish() { writer_->finish(); }

std::string SafetensorsOutput::reuse_state() const { return previous_ ? previous_->reuse_state() : ""; }

std::vector<std::string> SafetensorsOutput::complete_reuse(const std::vector<std::string>& states) {
    return previous_ ? previous_->complete(states) : std::vector<std::string>{};
}

void SafetensorsOutput::abandon() {
    writer_.reset();
    journal_.reset();
    // Without --resume in prospect (an archive converted back), nothing staged is kept.
    if (!options_.resumable) discard_staging(options_.target);
}

std::vector<std::string> SafetensorsOutput::commit() {
    try {
        if (previous_) previous_->link_unchanged();
        return commit_staging(options_.target, options_.force, options_.hf_dir,
                              plan_hf_file_copies(options_.hf_dir, options_.hf_training_files), *tensors_, layout_,
                              options_.generated);
    } catch (...) {
        if (!options_.resumable) discard_staging(options_.target);
        throw;
    }
}

}  // namespace vmerge
