#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vmerge {

// One checkpoint a training run saved, found under its run folder.
struct RunStep {
    int64_t step = 0;
    std::string name;            // the folder name it is merged under: global_step_N, iter_0000100, step-N
    std::string checkpoint_dir;  // what merge reads (--local_dir)
    bool complete = false;
    std::string why;             // how completeness was decided, or what is still missing
};

struct RunFolderRules {
    std::string role = "actor";    // verl: the role folder under global_step_N/
    int64_t settle_seconds = 60;   // FSDP steps without a marker: rank files unchanged this long
    int64_t now_seconds = 0;       // the time to compare mtimes with (0: the clock now)
};

// Every checkpoint under `root`, oldest step first, each with whether it is complete by its
// format's own marker (docs/watch.md): verl global_step_N/<role>/ (the run's
// latest_checkpointed_iteration.txt at N or later, written after the save; a layout-v2 role
// folder needs its ckpt_contents.json, written last; an FSDP folder without either needs all its
// rank files present and unchanged for the settle time), Megatron-LM iter_NNNNNNN/ (the tracker at
// N or later), DCP step-N/ (its .metadata, written last; a torchtitan HF save by its index),
// DeepSpeed tag folders global_stepN/ (the save_dir's latest naming it or a later tag), HF
// Trainer checkpoint-N/ (its trainer_state.json, written last). A half-written step is listed as
// incomplete, never guessed complete. Errors name the file when a marker is unreadable.
std::vector<RunStep> find_run_steps(const std::string& root, const RunFolderRules& rules);

// The step latest_checkpointed_iteration.txt in `dir` names; nullopt when there is none.
// "release" (Megatron-LM) names no step. Error when the file holds anything else.
std::optional<int64_t> tracker_step(const std::string& dir);

}  // namespace vmerge

namespace vmerge {

// `vmerge-mpi watch`: which run, where its outputs go, how often to look.
struct WatchOptions {
    std::string root;         // --root: the training run's checkpoint folder
    std::string target_root;  // --target_root: one merged folder per step below it
    RunFolderRules rules;     // --role, --settle
    int64_t every_seconds = 60;  // --every
    bool once = false;           // --once: one pass, then exit
    int64_t keep_last = 0;       // --keep_last K: remove older merged outputs (0: keep all)
    bool no_reuse = false;       // --no_reuse; by default each step is merged with --reuse of the
                                 // newest earlier merged step
};

}  // namespace vmerge
