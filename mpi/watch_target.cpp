#include "watch_target.h"

#include <filesystem>
#include <optional>

#include "core/error.h"
#include "io/input_tree.h"
#include "io/object_url.h"
#include "output/output_folder.h"
#include "output/s3/bucket_lock.h"
#include "output/s3/bucket_target.h"
#include "output/target_guard.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

constexpr const char* kWatchLockName = ".watch.vmerge-lock";

// `inner` is `outer` or lies below it, as key prefixes of one bucket ("" is the whole bucket).
bool prefix_within(const ObjectUrl& inner, const ObjectUrl& outer) {
    return inner.bucket == outer.bucket &&
           (outer.key.empty() || inner.key == outer.key || inner.key.starts_with(outer.key + "/"));
}

// The run and the outputs kept apart, as check_target_placement keeps a folder target from its
// inputs; a run in a bucket and a target on disk (or the reverse) cannot overlap.
void check_apart(const WatchOptions& w) {
    if (!is_object_url(w.target_root)) {
        if (!is_object_url(w.root)) check_target_placement(w.target_root, {{w.root, "the training run (--root)"}}, "--target_root");
        return;
    }
    if (!is_object_url(w.root)) return;
    const ObjectUrl run = parse_object_url(w.root), out = parse_object_url(w.target_root);
    if (prefix_within(run, out) || prefix_within(out, run))
        throw Error("--target_root " + out.text() + ": overlaps the training run (--root) " + run.text() +
                    "; give the merged steps a prefix of their own");
}

}  // namespace

StepOutputState step_output_state(const std::string& target) {
    StepOutputState state;
    if (is_object_url(target)) {
        const ObjectUrl folder = parse_object_url(target);
        state.merged = classify_bucket_target(folder).kind == TargetKind::VmergeOutput;
        state.interrupted = !state.merged && bucket_merge_interrupted(folder);
        return state;
    }
    state.merged = classify_target(target).kind == TargetKind::VmergeOutput;
    std::error_code ec;
    state.interrupted = !state.merged && fs::exists(staging_path(target), ec);
    return state;
}

void remove_step_output(const std::string& target) {
    if (is_object_url(target)) {
        remove_bucket_output(parse_object_url(target));
        return;
    }
    if (classify_target(target).kind != TargetKind::VmergeOutput) throw Error(target + ": not an output vmerge wrote; not removed");
    fs::remove_all(target);
}

struct WatchTargetLock::Held {
    std::optional<TargetLock> folder;
    std::optional<BucketLock> bucket;
};

WatchTargetLock::WatchTargetLock(const WatchOptions& w) : held_(std::make_unique<Held>()) {
    check_apart(w);
    const std::string refused = "another vmerge watch is running into --target_root " + w.target_root;
    if (is_object_url(w.target_root)) {
        held_->bucket.emplace(parse_object_url(join_path(w.target_root, kWatchLockName)), refused);
        return;
    }
    fs::create_directories(w.target_root);
    try {
        held_->folder.emplace((fs::path(w.target_root) / "watch").string());
    } catch (const Error& e) {
        throw Error(refused + " (" + e.what() + "); one watcher per target root");
    }
}

WatchTargetLock::~WatchTargetLock() = default;

}  // namespace vmerge
