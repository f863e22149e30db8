#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "plan/output_layout.h"
#include "output/target_guard.h"
#include "mapping/tensor_mapping.h"
#include "output/write_journal.h"

namespace vmerge {

// The merge is written into a staging folder beside the target and renamed into place only
// when every rank succeeded, so a failed run never leaves something that looks like a result.
std::string staging_path(const std::string& target);

// Rank 0, before anything is written: the target is outside every input folder, and absent,
// an empty folder, or (with `force`) an earlier vmerge output (target_guard.h).
void check_target(const std::string& target, bool force, const std::vector<InputFolder>& inputs);

// Removes an earlier staging folder of `target`; Error if vmerge did not make it.
void discard_earlier_staging(const std::string& target);

// A new staging folder with its journal folder (the mark of a staging folder vmerge made).
void create_fresh_staging(const std::string& target);

// Rank 0: checks the target, creates a fresh staging folder (an earlier one is removed only if
// vmerge made it), and creates every output file at its final size with its header written.
// With `resume`, an existing staging folder of the same plan, split and inputs is kept as it is.
struct StagingState {
    bool resumed = false;  // an interrupted merge's staging folder is being continued
    std::string note;      // for the user: what happened to an earlier staging folder
};
StagingState prepare_staging(const std::string& target, bool force, bool resume, const OutputLayout& layout,
                             const ResumeIdentity& identity, const std::vector<InputFolder>& inputs);

// Every planned output file is in the staging folder, a regular file of its planned size.
void check_planned_files(const std::string& staging, const OutputLayout& layout);

// The staging folder holds exactly the planned output files (at their planned sizes) plus
// `other_files`, and nothing else: no stray file, no link, no file grown since.
void check_staging_files(const std::string& staging, const OutputLayout& layout,
                         const std::vector<std::string>& other_files);
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

// The files of an HF folder a merge copies: everything but weights and weight indexes, each a
// regular file inside the folder after links are resolved. The others are skipped, with why.
struct HfFileCopy {
    std::string rel;     // name in the folder
    std::string source;  // the resolved path read
};
struct HfFilePlan {
    std::vector<HfFileCopy> copies;
    std::vector<std::string> skipped;
};
HfFilePlan plan_hf_file_copies(const std::string& hf_dir);
std::string read_hf_file(const HfFileCopy& file);

// Error unless `rel` is a plain relative path (no "..", no absolute path); `source` names who gave it.
void check_output_name(const std::string& rel, const std::string& source);

// Rank 0, after all ranks wrote: checks the staging folder holds exactly the plan, copies the
// files of `hf_dir`, writes `generated_files` (path in the folder -> text; they replace copied
// ones), the checksums, the index when the model has several shards, and publishes. Returns
// notes on HF files not copied.
std::vector<std::string> commit_staging(const std::string& target, bool force, const std::string& hf_dir,
                                        const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                                        const std::map<std::string, std::string>& generated_files = {});

// Writes `files` into the staging folder, then the manifest of everything in it, moves the
// journal aside and renames the staging folder to `target` (journal restored if that fails).
void publish_staging(const std::string& target, bool force, const std::map<std::string, std::string>& files);

// fsync of a file or folder (best effort: a file system without fsync on folders is not an error).
void fsync_path(const std::string& path, bool directory = false);

// Writes `bytes` to `path` (parent folders created; never through a link) and fsyncs it;
// `what` ends the error message.
void write_durable(const std::string& path, const std::string& bytes, const std::string& what = "");

// Syncs the staging folder and renames it to `target`. An existing target must be an empty
// folder, or an earlier vmerge output with `force` (moved aside, removed after); then syncs
// the parent folder.
void move_into_place(const std::string& staging, const std::string& target, bool force);

// Removes `old` (an earlier output moved aside) only if it is a vmerge output or empty.
void remove_our_staging_leftover(const std::string& old);

// Removes the staging folder after a failure, if vmerge made it (best effort).
void discard_staging(const std::string& target);

}  // namespace vmerge
