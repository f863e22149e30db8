#include "output/output_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "io/checksum.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/object_url.h"
#include "io/input_file.h"
#include "plan/rank_work.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }


// `inner` equals `outer` or lies below it (both canonical).
bool within_folder(const fs::path& inner, const fs::path& outer) {
    auto i = inner.begin();
    for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
        if (i == inner.end() || *i != *o) return false;
    return true;
}

}  // namespace

void pwrite_all(int fd, const unsigned char* data, size_t size, uint64_t offset, const std::string& path) {
    while (size > 0) {
        ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            throw Error(path + ": write of " + std::to_string(size) + " bytes at offset " +
                        std::to_string(offset) + " failed: " + errno_text());
        data += n;
        size -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

std::string staging_path(const std::string& target) {
    fs::path t = fs::path(target).lexically_normal();
    if (t.filename().empty()) t = t.parent_path();
    return (t.parent_path() / ("." + t.filename().string() + ".vmerge-staging")).string();
}

// A staging folder vmerge made holds its journal folder from the moment it is created: only
// such a folder is ever removed or continued.
bool is_our_staging(const std::string& staging) {
    std::error_code ec;
    return fs::is_directory(fs::symlink_status(journal_dir(staging), ec)) &&
           fs::is_directory(fs::symlink_status(staging, ec));
}

namespace {

// Where the journal waits while the staging folder is renamed into place (it is not part of
// the output, and must survive a failed rename for --resume).
std::string detached_journal(const std::string& target) {
    fs::path t = fs::absolute(target).lexically_normal();
    if (t.filename().empty()) t = t.parent_path();
    return (t.parent_path() / ("." + t.filename().string() + ".vmerge-journal")).string();
}

}  // namespace

void discard_earlier_staging(const std::string& target) {
    const std::string staging = staging_path(target);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(staging, ec))) return;
    if (!is_our_staging(staging))
        throw Error(staging + ": exists and was not made by vmerge (no " + journal_dir(staging) +
                    "); move it away, vmerge does not delete what it did not create");
    fs::remove_all(staging, ec);
    if (ec) throw Error(staging + ": cannot remove the earlier staging folder: " + ec.message());
}

// A journal detached by a commit whose rename failed goes back where --resume looks for it.
void reattach_journal(const std::string& target) {
    const std::string staging = staging_path(target), aside = detached_journal(target);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(aside, ec))) return;
    if (fs::is_directory(fs::symlink_status(staging, ec)) && !fs::exists(fs::symlink_status(journal_dir(staging), ec)))
        fs::rename(aside, journal_dir(staging), ec);
}

void create_fresh_staging(const std::string& target) {
    const std::string staging = staging_path(target);
    std::error_code ec;
    fs::create_directory(staging, ec);
    if (ec) throw Error(staging + ": cannot create the staging folder: " + ec.message());
    fs::create_directory(journal_dir(staging), ec);
    if (ec) {
        fs::remove(staging);
        throw Error(journal_dir(staging) + ": cannot create: " + ec.message());
    }
}

namespace {

// The names a merge makes beside the target are its own plus a suffix; the longest is the lock's
// stale name ("." + name + ".vmerge-lock.stale-" + a pid). A target whose name leaves no room
// for them could be written once and never replaced: refused before anything is made.
void check_derived_names_fit(const std::string& target) {
    const fs::path t = fs::path(target).lexically_normal();
    const std::string name = (t.has_filename() ? t : t.parent_path()).filename().string();
    constexpr size_t kLongestSuffix = std::char_traits<char>::length("..vmerge-lock.stale-4294967295");
    const fs::path parent = fs::absolute(t).parent_path();
    const long limit = ::pathconf(parent.c_str(), _PC_NAME_MAX);
    const size_t most = limit > 0 ? static_cast<size_t>(limit) : 255;
    if (name.size() + kLongestSuffix > most)
        throw Error(target + ": a name of " + std::to_string(name.size()) + " bytes leaves no room for the staging, journal "
                    "and lock names vmerge makes beside it (" + std::to_string(kLongestSuffix) + " bytes more, at most " +
                    std::to_string(most) + " in all on that file system); choose a target name of at most " +
                    std::to_string(most - kLongestSuffix) + " bytes");
}

// The name the journal waits under during the final rename must be free, unless it is the
// journal of this target's interrupted merge, which its --resume takes back (reattach_journal):
// found now, not after hours of copying.
void check_journal_name_free(const std::string& target) {
    const std::string staging = staging_path(target), aside = detached_journal(target);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(aside, ec))) return;
    if (fs::is_directory(fs::symlink_status(staging, ec)) && !fs::exists(fs::symlink_status(journal_dir(staging), ec))) return;
    throw Error(aside + ": exists, and the journal must wait there during the final rename; it was not made by this "
                        "merge, so move it away first");
}

}  // namespace

void check_target(const std::string& target, bool force, const std::vector<InputFolder>& inputs) {
    check_derived_names_fit(target);
    check_journal_name_free(target);
    check_target_placement(target, inputs);
    check_target_replaceable(target, force);
}

namespace {

// Which of the HF folder's files are model files to copy (not weights, not a PEFT adapter's
// config, not training state); the reason for each one left out goes into `skipped`.
bool keep_hf_file(const std::string& rel, const std::vector<std::string>& training_files, HfFilePlan& plan) {
    const std::string name = fs::path(rel).filename().string();
    if (is_weight_file(name)) return false;
    // A PEFT adapter's config never describes the weights this merge writes (an extracted
    // adapter gets its own, written from them); at the top it would make loaders take the
    // model folder for an adapter.
    if (name == "adapter_config.json") {
        plan.skipped.push_back(rel + ": a PEFT adapter's config, not a model file (an extracted adapter gets the "
                               "adapter_config.json written for its weights, in lora_adapter/)");
        return false;
    }
    const bool training = std::any_of(training_files.begin(), training_files.end(), [&](const std::string& t) {
        return rel == t || (t.ends_with("/") && rel.starts_with(t));
    });
    if (training) plan.skipped.push_back(rel + ": training state of the checkpoint, not a model file");
    return !training;
}

}  // namespace

HfFilePlan plan_hf_file_copies(const std::string& hf_dir, const std::vector<std::string>& training_files) {
    HfFilePlan plan;
    if (is_object_url(hf_dir)) {  // a store folder: its objects, which are never links or devices
        if (!is_folder(hf_dir)) return plan;
        for (const auto& object : list_objects_under(hf_dir))
            if (keep_hf_file(object.name, training_files, plan)) plan.copies.push_back({object.name, join_path(hf_dir, object.name)});
        return plan;
    }
    std::error_code ec;
    if (hf_dir.empty() || !fs::is_directory(hf_dir, ec)) return plan;
    const fs::path root = fs::canonical(hf_dir, ec);
    if (ec) throw Error(hf_dir + ": cannot resolve: " + ec.message());
    for (const auto& rel : folder_entries(hf_dir)) {
        const fs::path path = fs::path(hf_dir) / rel;
        const fs::file_status st = fs::symlink_status(path, ec);
        if (fs::is_directory(st) || !keep_hf_file(rel, training_files, plan)) continue;
        const fs::path real = fs::canonical(path, ec);
        std::string why;
        if (ec) why = "a link to nothing";
        else if (!within_folder(real, root)) why = "a link that leads outside " + hf_dir + " (to " + real.string() + ")";
        else if (!fs::is_regular_file(fs::status(real, ec))) why = "not a regular file";
        if (why.empty()) plan.copies.push_back({rel, real.string()});
        else plan.skipped.push_back(rel + ": " + why);
    }
    return plan;
}

std::string read_hf_file(const HfFileCopy& file) {
    const InputFile in(file.source);
    std::string bytes(in.size(), '\0');
    in.read_exact(0, bytes.data(), bytes.size(), "a Hugging Face file");
    return bytes;
}

void publish_staging(const std::string& target, bool force, const std::map<std::string, std::string>& files) {
    const std::string staging = staging_path(target);
    for (const auto& [rel, bytes] : files) {
        check_output_name(rel, target);
        write_durable((fs::path(staging) / rel).string(), bytes, "");
    }
    std::vector<std::string> listed;
    const std::string journal = fs::path(journal_dir(staging)).filename().string();
    for (const auto& rel : folder_entries(staging))
        if (rel != journal && !rel.starts_with(journal + "/") && !fs::is_directory(fs::symlink_status(fs::path(staging) / rel)))
            listed.push_back(rel);
    write_durable(staging + "/" + kManifestFile, manifest_json(listed), " the manifest");
    // The journal is not part of the output, but must outlive a failed rename for --resume.
    const std::string aside = detached_journal(target);
    std::error_code ec;
    if (fs::exists(fs::symlink_status(aside, ec)))
        throw Error(aside + ": exists, and the journal must wait there during the final rename; it was not made by "
                            "this merge, so move it away and rerun with --resume");
    fs::rename(journal_dir(staging), aside, ec);
    if (ec) throw Error(journal_dir(staging) + ": cannot move the journal out of the staging folder: " + ec.message());
    try {
        move_into_place(staging, target, force);
    } catch (...) {
        fs::rename(aside, journal_dir(staging), ec);
        throw;
    }
    fs::remove_all(aside, ec);
}

void fsync_path(const std::string& path, bool directory) {
    int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

void write_durable(const std::string& path, const std::string& bytes, const std::string& what) {
    fs::create_directories(fs::path(path).parent_path());
    // Never through a link: whatever the staging folder holds, the bytes land in it.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(path + ": cannot write" + what + ": " + errno_text());
    try {
        pwrite_all(fd, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), 0, path);
        if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + errno_text());
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
}

void move_into_place(const std::string& staging, const std::string& target, bool force) {
    fsync_path(staging, true);
    std::error_code ec;
    std::string old;
    const ExistingTarget existing = classify_target(target);
    if (existing.kind == TargetKind::EmptyFolder) {
        fs::remove(target, ec);  // rename(2) replaces an empty folder too; this keeps the two cases alike
    } else if (existing.kind != TargetKind::Absent) {
        if (existing.kind != TargetKind::VmergeOutput || !force) check_target_replaceable(target, force);
        old = staging + ".old";
        remove_our_staging_leftover(old);
        fs::rename(target, old, ec);
        if (ec) throw Error(target + ": cannot move the old folder aside: " + ec.message());
    }
    fs::rename(staging, target, ec);
    if (ec) {
        if (!old.empty()) fs::rename(old, target);
        throw Error(target + ": cannot move the merged folder into place: " + ec.message());
    }
    fsync_path(fs::path(target).lexically_normal().parent_path().string(), true);
    if (!old.empty()) fs::remove_all(old, ec);
}

void remove_our_staging_leftover(const std::string& old) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(old, ec))) return;
    const TargetKind kind = classify_target(old).kind;
    if (kind != TargetKind::VmergeOutput && kind != TargetKind::EmptyFolder)
        throw Error(old + ": exists and is not an earlier vmerge output; move it away");
    fs::remove_all(old, ec);
}

void discard_staging(const std::string& target) {
    const std::string staging = staging_path(target);
    if (!is_our_staging(staging)) return;
    std::error_code ec;
    fs::remove_all(staging, ec);
}

}  // namespace vmerge
