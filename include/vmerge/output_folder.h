#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vmerge/output_layout.h"
#include "vmerge/tensor_mapping.h"
#include "vmerge/write_journal.h"

namespace vmerge {

// The merge is written into a staging folder beside the target and renamed into place only
// when every rank succeeded, so a failed run never leaves something that looks like a result.
std::string staging_path(const std::string& target);

// Rank 0: refuses an existing target without `force`, creates a fresh staging folder, and
// creates every output file at its final size with its header written. With `resume`, an
// existing staging folder of the same plan and split is kept as it is.
struct StagingState {
    bool resumed = false;  // an interrupted merge's staging folder is being continued
    std::string note;      // for the user: what happened to an earlier staging folder
};
StagingState prepare_staging(const std::string& target, bool force, bool resume, const OutputLayout& layout,
                             const ResumeIdentity& identity);

// Writes row blocks at their planned offsets (pwrite); one per rank. With a journal, every
// block is made durable (fdatasync) and then recorded with its checksum.
class OutputWriter {
public:
    OutputWriter(const std::string& staging, const std::vector<OutputTensor>& tensors,
                 const OutputLayout& layout, JournalWriter* journal = nullptr);
    ~OutputWriter();
    OutputWriter(const OutputWriter&) = delete;
    OutputWriter& operator=(const OutputWriter&) = delete;

    void write(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size);
    // Whether the staging file already holds `block` intact (read back and checksummed).
    bool holds(const WrittenBlock& block);
    // fsyncs and closes every file this writer opened.
    void finish();

private:
    int fd_for(size_t file);
    std::string staging_;
    const std::vector<OutputTensor>& tensors_;
    const OutputLayout& layout_;
    JournalWriter* journal_;
    std::mutex fds_mutex_;  // write() runs on the executor's writer thread, holds() on the main one
    std::vector<int> fds_;
    std::vector<unsigned char> readback_;
};

// Rank 0, after all ranks wrote: copies every non-weight file of `hf_dir`, writes
// `generated_files` (path in the folder -> text; a quantized model's config.json replaces the
// copied one, an extracted adapter's adapter_config.json), the index when the model has
// several shards, fsyncs, and renames the staging folder to `target`.
void commit_staging(const std::string& target, bool force, const std::string& hf_dir,
                    const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                    const std::map<std::string, std::string>& generated_files = {});

// fsync of a file or folder (best effort: a file system without fsync on folders is not an error).
void fsync_path(const std::string& path, bool directory = false);

// Writes `bytes` to `path` (parent folders created) and fsyncs it; `what` ends the error message.
void write_durable(const std::string& path, const std::string& bytes, const std::string& what = "");

// Syncs the staging folder and renames it to `target` (an existing target, with `force`, is
// moved aside first and removed after), then syncs the parent folder.
void move_into_place(const std::string& staging, const std::string& target, bool force);

// Removes the staging folder after a failure (best effort).
void discard_staging(const std::string& target);

// Files of an HF folder that a merge copies: everything but weights and weight indexes.
std::vector<std::string> non_weight_files(const std::string& hf_dir);

}  // namespace vmerge
