#pragma once
#include <memory>
#include <string>

#include "watch/run_folder.h"

namespace vmerge {

// Where `vmerge-mpi watch` writes: --target_root is a local folder or a bucket prefix
// (s3://bucket/prefix), each step merged into <target_root>/<step>. What watch asks of a
// step's output is the same for both; a bucket answers from its listing and the manifest that
// BucketOutput writes last (output/s3/bucket_target.h), a folder as target_guard.h judges it.

struct StepOutputState {
    bool merged = false;       // a complete vmerge output: its manifest lists everything there
    bool interrupted = false;  // a merge into it stopped before its commit: continued with --resume
};
StepOutputState step_output_state(const std::string& target);

// --keep_last: removes an output step_output_state calls merged (only what vmerge wrote).
void remove_step_output(const std::string& target);

// The target root checked against the run (neither inside the other), made where it is a folder,
// and locked for this watcher: `<target_root>/.watch.vmerge-lock`, a file or an object. Held
// until destroyed; a second watcher is refused naming the holder.
class WatchTargetLock {
public:
    explicit WatchTargetLock(const WatchOptions& w);
    ~WatchTargetLock();
    WatchTargetLock(const WatchTargetLock&) = delete;
    WatchTargetLock& operator=(const WatchTargetLock&) = delete;

private:
    struct Held;
    std::unique_ptr<Held> held_;
};

}  // namespace vmerge
