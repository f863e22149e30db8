#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "io/output_names.h"  // is_weight_file, check_output_name
#include "plan/output_layout.h"
#include "output/target_guard.h"
#include "core/tensor_mapping.h"
#include "output/write_journal.h"

namespace vmerge {

// The merge is written into a staging folder beside the target and renamed into place only
// when every rank succeeded, so a failed run never leaves something that looks like a result.
std::string staging_path(const std::string& target);

// Rank 0, before anything is written: the target is outside every input folder, and absent,
// an empty folder, or (with `force`) an earlier vmerge output (target_guard.h).
void check_target(const std::string& target, bool force, const std::vector<InputFolder>& inputs);

// Whether `staging` is a staging folder vmerge made (it holds its journal folder).
bool is_our_staging(const std::string& staging);

// A journal detached by a commit whose rename failed goes back where --resume looks for it.
void reattach_journal(const std::string& target);

// Writes all `size` bytes at `offset` of `fd` (`path` names it in errors).
void pwrite_all(int fd, const unsigned char* data, size_t size, uint64_t offset, const std::string& path);

// Removes an earlier staging folder of `target`; Error if vmerge did not make it.
void discard_earlier_staging(const std::string& target);

// A new staging folder with its journal folder (the mark of a staging folder vmerge made).
void create_fresh_staging(const std::string& target);

// What prepare (of a format) did with the staging folder.
struct StagingState {
    bool resumed = false;  // an interrupted merge's staging folder is being continued
    std::string note;      // for the user: what happened to an earlier staging folder
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
// `training_files` (names or "folder/" prefixes in `hf_dir`) are the checkpoint's training
// state kept beside the model files (a trainer's `latest`, `trainer_state.json`): skipped.
HfFilePlan plan_hf_file_copies(const std::string& hf_dir, const std::vector<std::string>& training_files = {});
std::string read_hf_file(const HfFileCopy& file);

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
