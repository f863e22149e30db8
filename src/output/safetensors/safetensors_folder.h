#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/stopwatch.h"
#include "core/tensor_mapping.h"
#include "output/output_folder.h"
#include "output/target_guard.h"
#include "output/write_journal.h"
#include "output/safetensors/previous_output.h"
#include "plan/output_layout.h"

namespace vmerge {

// The safetensors folder in the shared staging lifecycle (output_folder.h): its files created
// at their planned sizes with their headers, row blocks written at their offsets and
// journaled, and the commit that adds the index and the checksums.

// Rank 0: checks the target, creates a fresh staging folder (an earlier one is removed only if
// vmerge made it), and creates every output file at its final size with its header written.
// With `resume`, an existing staging folder of the same plan, split and inputs is kept as it is.
StagingState prepare_staging(const std::string& target, bool force, bool resume, bool restart, const OutputLayout& layout,
                             const ResumeIdentity& identity, const std::vector<InputFolder>& inputs);

// Every planned output file is in the staging folder, a regular file of its planned size.
void check_planned_files(const std::string& staging, const OutputLayout& layout);

// The staging folder holds exactly the planned output files (at their planned sizes) plus
// `other_files`, and nothing else: no stray file, no link, no file grown since.
void check_staging_files(const std::string& staging, const OutputLayout& layout,
                         const std::vector<std::string>& other_files);
// Writes row blocks at their planned offsets (pwrite); one per rank. With a journal, blocks are
// made durable (fdatasync) in batches and then recorded with their checksums. With `previous`
// (--reuse), a block equal to the previous output's is journaled but not written.
class OutputWriter {
public:
    OutputWriter(const std::string& staging, const std::vector<OutputTensor>& tensors,
                 const OutputLayout& layout, JournalWriter* journal = nullptr, bool evict_written = false,
                 PreviousOutput* previous = nullptr);
    ~OutputWriter();
    OutputWriter(const OutputWriter&) = delete;
    OutputWriter& operator=(const OutputWriter&) = delete;

    // `xxh64`: the bytes' hash when the caller has it already (else it is computed here).
    void write(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size,
               std::optional<uint64_t> xxh64 = std::nullopt);
    // Whether the staging file already holds `block` intact (read back and checksummed).
    bool holds(const WrittenBlock& block);
    // Makes the last batch durable and journals it; fsyncs and closes every file this writer opened.
    void finish();

private:
    int fd_for(size_t file);
    void make_durable();
    std::string staging_;
    const std::vector<OutputTensor>& tensors_;
    const OutputLayout& layout_;
    JournalWriter* journal_;
    bool evict_written_;  // PageCachePolicy::Evict: durable blocks dropped from the page cache
    PreviousOutput* previous_;
    std::mutex fds_mutex_;  // write() runs on the executor's writer thread, holds() on the main one
    std::vector<int> fds_;
    std::vector<unsigned char> readback_;
    std::vector<WrittenBlock> pending_;  // written, not yet made durable nor journaled
    uint64_t pending_bytes_ = 0;
    Clock::time_point pending_since_;
};

// Rank 0, after all ranks wrote: checks the staging folder holds exactly the plan, copies the
// files of the HF folder (`hf_files`, plan_hf_file_copies), writes `generated_files` (path in the folder -> text; they replace copied
// ones), the checksums, the index when the model has several shards, and publishes. Returns
// notes on HF files not copied.
std::vector<std::string> commit_staging(const std::string& target, bool force, const std::string& hf_dir,
                                        const HfFilePlan& hf_files,
                                        const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                                        const std::map<std::string, std::string>& generated_files = {});

}  // namespace vmerge
