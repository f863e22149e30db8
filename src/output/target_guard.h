#pragma once
#include <string>
#include <vector>

namespace vmerge {

// What a merge may do to its --target_dir and the folders beside it. The user's files are
// sacred: the target never is, contains or lies inside an input folder; --force replaces only
// an empty folder or an earlier vmerge output (one whose manifest lists every entry in it); a
// lock beside the target keeps two merges from writing (and discarding) the same staging folder.

// Every output folder ends with this manifest: which program wrote it and every file in it.
constexpr const char* kManifestFile = "vmerge.manifest.json";
std::string manifest_json(const std::vector<std::string>& files);

// Throws Error when `target` is, contains or lies inside one of `inputs` (after resolving
// links, and lexically); empty inputs are skipped. `what` names each input for the message.
struct InputFolder {
    std::string path;
    std::string what;  // "the checkpoint (--local_dir)", ...
};
void check_target_placement(const std::string& target, const std::vector<InputFolder>& inputs,
                            const std::string& flag = "--target_dir");

enum class TargetKind { Absent, EmptyFolder, VmergeOutput, Other };
struct ExistingTarget {
    TargetKind kind = TargetKind::Absent;
    std::string reason;  // Other: what makes it not replaceable
};
ExistingTarget classify_target(const std::string& target);

// Throws Error unless a merge may write `target`: absent or an empty folder always, an earlier
// vmerge output with `force`; anything else never (not even with --force).
void check_target_replaceable(const std::string& target, bool force);

// `<parent>/.<name>.vmerge-lock`, created exclusively with the holder's host and pid. A lock
// whose holder ran on this host and is gone (a killed merge) is taken over; a live holder, or
// one on another host, is an Error naming it.
class TargetLock {
public:
    explicit TargetLock(const std::string& target);
    ~TargetLock();
    TargetLock(const TargetLock&) = delete;
    TargetLock& operator=(const TargetLock&) = delete;
    static std::string path_for(const std::string& target);

private:
    void acquire(const std::string& target);
    std::string path_;
    std::string token_;
};

// What a lock holds for this process: "host pid start-time\n" (a lock file, a bucket's lock
// object). Whether the holder a lock's text names ran on this host and is gone (killed).
std::string lock_holder_token();
bool lock_holder_is_gone(const std::string& text);

// What the process prints on stderr when SIGINT/SIGTERM/SIGHUP stops it while it holds a
// target lock ("" for nothing): where the unfinished output is kept and how to continue it.
void say_on_interrupt(const std::string& text);

// The names below `dir` (files and folders, relative, sorted), without following links.
std::vector<std::string> folder_entries(const std::string& dir);

}  // namespace vmerge
