#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace vmerge {

// What resolution needs to know of one folder: its subfolders and the text of a
// latest_checkpointed_iteration.txt in it (verl writes the step there, as Megatron-LM does the
// iteration).
struct FolderListing {
    bool exists = false;
    std::vector<std::string> subfolders;
    std::optional<std::string> tracker;  // latest_checkpointed_iteration.txt, when present
};
using FolderLister = std::function<FolderListing(const std::string& dir)>;

// The folder a merge reads after following the levels of a verl run, and how it got there
// (one line per level, for inspect and the notes).
struct CheckpointLevel {
    std::string dir;
    std::vector<std::string> steps;
};

// verl saves <run>/latest_checkpointed_iteration.txt and <run>/global_step_N/<role>/: a run
// folder (one with global_step_N/ subfolders) goes to the step the tracker names or `step`;
// a step folder holding actor/ or critic/ goes to its only role, or to `role` (two roles and
// no `role` is an Error listing them). Any other folder is the checkpoint itself. `step` or
// `role` that finds nothing to choose is an Error. Pure: the file system is seen through `list`.
CheckpointLevel resolve_checkpoint_level(const std::string& dir, std::optional<int> step, const std::string& role,
                                         const FolderLister& list);

// True when the folder is a verl run folder (it has global_step_N/ subfolders).
bool is_run_folder(const FolderListing& listing);

// The lister that reads the file system.
FolderListing list_folder(const std::string& dir);

}  // namespace vmerge
