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
#include "io/input_file.h"
#include "plan/rank_work.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }

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

// `inner` equals `outer` or lies below it (both canonical).
bool within_folder(const fs::path& inner, const fs::path& outer) {
    auto i = inner.begin();
    for (auto o = outer.begin(); o != outer.end(); ++o, ++i)
        if (i == inner.end() || *i != *o) return false;
    return true;
}

bool is_weight_file(const std::string& name) {
    auto ends_with = [&](const char* suffix) { return name.ends_with(suffix); };
    return ends_with(".safetensors") || ends_with(".bin") || ends_with(".pt") || ends_with(".pth") ||
           name == "model.safetensors.index.json" || name == "pytorch_model.bin.index.json" || name == kChecksumsFile;
}

}  // namespace

std::string staging_path(const std::string& target) {
    fs::path t = fs::path(target).lexically_normal();
    if (t.filename().empty()) t = t.parent_path();
    return (t.parent_path() / ("." + t.filename().string() + ".vmerge-staging")).string();
}

namespace {

void create_output_files(const std::string& staging, const OutputLayout& layout) {
    for (const OutputFile& file : layout.files) {
        const std::string path = staging + "/" + file.name;
        fs::create_directories(fs::path(path).parent_path());
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) throw Error(path + ": cannot create: " + errno_text());
        try {
            pwrite_all(fd, reinterpret_cast<const unsigned char*>(file.header.data()), file.header.size(), 0, path);
            if (::ftruncate(fd, static_cast<off_t>(file.size)) != 0)
                throw Error(path + ": cannot size to " + std::to_string(file.size) + " bytes: " + errno_text());
            if (::fsync(fd) != 0) throw Error(path + ": fsync failed: " + errno_text());
        } catch (...) {
            ::close(fd);
            throw;
        }
        ::close(fd);
    }
}

}  // namespace

namespace {

// A staging folder vmerge made holds its journal folder from the moment it is created: only
// such a folder is ever removed or continued.
bool is_our_staging(const std::string& staging) {
    std::error_code ec;
    return fs::is_directory(fs::symlink_status(journal_dir(staging), ec)) &&
           fs::is_directory(fs::symlink_status(staging, ec));
}

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

namespace {

// A journal detached by a commit whose rename failed goes back where --resume looks for it.
void reattach_journal(const std::string& target) {
    const std::string staging = staging_path(target), aside = detached_journal(target);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(aside, ec))) return;
    if (fs::is_directory(fs::symlink_status(staging, ec)) && !fs::exists(fs::symlink_status(journal_dir(staging), ec)))
        fs::rename(aside, journal_dir(staging), ec);
}

}  // namespace

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

void check_target(const std::string& target, bool force, const std::vector<InputFolder>& inputs) {
    check_target_placement(target, inputs);
    check_target_replaceable(target, force);
}

StagingState prepare_staging(const std::string& target, bool force, bool resume, const OutputLayout& layout,
                             const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) {
    check_target(target, force, inputs);
    const std::string staging = staging_path(target);
    reattach_journal(target);
    StagingState state;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(staging, ec))) {
        if (resume && is_our_staging(staging)) {
            check_resume_identity(staging, identity);
            check_planned_files(staging, layout);
            state.resumed = true;
            state.note = "resuming the interrupted merge in " + staging;
            return state;
        }
        discard_earlier_staging(target);
        state.note = "discarded the staging folder of an earlier, unfinished merge (" + staging +
                     "); --resume would have continued it";
    } else if (resume) {
        state.note = "nothing to resume (no " + staging + "): merging from the start";
    }
    create_fresh_staging(target);
    try {
        create_output_files(staging, layout);
        write_resume_identity(staging, identity);
    } catch (...) {
        // Nothing was merged yet: leave nothing behind.
        fs::remove_all(staging, ec);
        throw;
    }
    return state;
}

void check_planned_files(const std::string& staging, const OutputLayout& layout) {
    for (const OutputFile& f : layout.files) {
        const std::string path = staging + "/" + f.name;
        std::error_code ec;
        const fs::file_status st = fs::symlink_status(path, ec);
        if (!fs::is_regular_file(st))
            throw Error(path + ": " + (fs::exists(st) ? "not a regular file" : "missing") +
                        " in the staging folder; rerun without --resume");
        const auto size = fs::file_size(path, ec);
        if (ec || size != f.size)
            throw Error(path + ": " + std::to_string(size) + " bytes, the plan says " + std::to_string(f.size) +
                        " (changed after the interrupted merge); rerun without --resume");
    }
}

void check_staging_files(const std::string& staging, const OutputLayout& layout,
                         const std::vector<std::string>& other_files) {
    check_planned_files(staging, layout);
    std::set<std::string> allowed(other_files.begin(), other_files.end());
    for (const OutputFile& f : layout.files) allowed.insert(f.name);
    std::set<std::string> folders;
    for (const auto& f : allowed)
        for (fs::path p = fs::path(f).parent_path(); !p.empty(); p = p.parent_path()) folders.insert(p.string());
    const std::string journal = fs::path(journal_dir(staging)).filename().string();
    for (const auto& rel : folder_entries(staging)) {
        if (rel == journal || rel.starts_with(journal + "/")) continue;
        const fs::file_status st = fs::symlink_status(fs::path(staging) / rel);
        if (fs::is_directory(st) ? folders.count(rel) : fs::is_regular_file(st) && allowed.count(rel)) continue;
        throw Error(staging + "/" + rel + ": not a file this merge writes (was it put into the staging folder?); "
                    "remove it, or rerun without --resume");
    }
}

OutputWriter::OutputWriter(const std::string& staging, const std::vector<OutputTensor>& tensors,
                           const OutputLayout& layout, JournalWriter* journal)
    : staging_(staging), tensors_(tensors), layout_(layout), journal_(journal), fds_(layout.files.size(), -1) {}

OutputWriter::~OutputWriter() {
    for (int fd : fds_)
        if (fd >= 0) ::close(fd);
}

int OutputWriter::fd_for(size_t file) {
    std::lock_guard lock(fds_mutex_);
    if (fds_[file] < 0) {
        const std::string path = staging_ + "/" + layout_.files[file].name;
        fds_[file] = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fds_[file] < 0) throw Error(path + ": cannot open for writing: " + errno_text());
    }
    return fds_[file];
}

void OutputWriter::write(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size) {
    const TensorLocation& where = layout_.locations[tensor];
    const uint64_t offset = where.offset + static_cast<uint64_t>(row_begin) * row_bytes(tensors_[tensor]);
    const std::string path = staging_ + "/" + layout_.files[where.file].name;
    const int fd = fd_for(where.file);
    pwrite_all(fd, data, size, offset, path);
    if (!journal_) return;
    if (::fdatasync(fd) != 0) throw Error(path + ": fdatasync failed: " + errno_text());
    // Written once and durable: keep it out of the page cache (a merge larger than RAM).
    if (size >= (1u << 20)) ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(size), POSIX_FADV_DONTNEED);
    journal_->append({tensor, row_begin, row_end, where.file, offset, size, xxh64(data, size)});
}

bool OutputWriter::holds(const WrittenBlock& block) {
    readback_.resize(block.length);
    const int fd = fd_for(block.file);
    size_t done = 0;
    while (done < block.length) {
        const ssize_t n = ::pread(fd, readback_.data() + done, block.length - done, static_cast<off_t>(block.offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return xxh64(readback_.data(), block.length) == block.hash;
}

void OutputWriter::finish() {
    for (size_t f = 0; f < fds_.size(); ++f) {
        if (fds_[f] < 0) continue;
        if (::fsync(fds_[f]) != 0)
            throw Error(staging_ + "/" + layout_.files[f].name + ": fsync failed: " + errno_text());
        ::close(fds_[f]);
        fds_[f] = -1;
    }
}

HfFilePlan plan_hf_file_copies(const std::string& hf_dir) {
    HfFilePlan plan;
    std::error_code ec;
    if (hf_dir.empty() || !fs::is_directory(hf_dir, ec)) return plan;
    const fs::path root = fs::canonical(hf_dir, ec);
    if (ec) throw Error(hf_dir + ": cannot resolve: " + ec.message());
    for (const auto& rel : folder_entries(hf_dir)) {
        const fs::path path = fs::path(hf_dir) / rel;
        const fs::file_status st = fs::symlink_status(path, ec);
        if (fs::is_directory(st) || is_weight_file(path.filename().string())) continue;
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

void check_output_name(const std::string& rel, const std::string& source) {
    const fs::path p(rel);
    bool ok = !rel.empty() && p.is_relative();
    for (const auto& part : p) ok = ok && part != ".." && part != "." && !part.empty();
    if (!ok) throw Error(source + ": file name '" + rel + "' is not a plain relative path inside the output folder");
}

std::vector<std::string> commit_staging(const std::string& target, bool force, const std::string& hf_dir,
                                        const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                                        const std::map<std::string, std::string>& generated_files) {
    const std::string staging = staging_path(target);
    const HfFilePlan hf = plan_hf_file_copies(hf_dir);
    std::map<std::string, std::string> files = generated_files;
    for (const auto& copy : hf.copies)
        if (!files.count(copy.rel)) files[copy.rel] = read_hf_file(copy);
    files[kChecksumsFile] = checksums_json(layout, read_journals(staging));
    if (layout.model_files > 1) files["model.safetensors.index.json"] = index_json(tensors, layout);
    // An earlier commit of this merge that failed may have written some of these already.
    std::vector<std::string> commit_files{kManifestFile};
    for (const auto& [rel, _] : files) commit_files.push_back(rel);
    check_staging_files(staging, layout, commit_files);
    publish_staging(target, force, files);
    std::vector<std::string> notes;
    for (const auto& s : hf.skipped) notes.push_back("not copied from " + hf_dir + ": " + s);
    return notes;
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
    fs::remove_all(aside, ec);
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
