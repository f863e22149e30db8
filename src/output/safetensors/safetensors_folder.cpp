#include "output/safetensors/safetensors_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/stopwatch.h"
#include "io/checksum.h"
#include "plan/rank_work.h"
#include "output/safetensors/safetensors_layout.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }

// Bytes hashed and written at once: well inside a core's L2 cache.
constexpr size_t kWritePiece = 512u << 10;

// Written blocks are made durable (fdatasync) and journaled in batches of this many bytes, or
// once the oldest is this old: one fdatasync per 8 MiB block made the disk wait on every block
// (the 2 GB bf16 FSDP merge on disk took 2.17 s with 375 fdatasyncs, 1.80 s with none). An
// interrupted merge loses at most a batch, which --resume writes again.
constexpr uint64_t kDurableBatchBytes = 128ull << 20;
constexpr double kDurableBatchSeconds = 0.5;

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

StagingState prepare_staging(const std::string& target, bool force, bool resume, bool restart, const OutputLayout& layout,
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
        // An interrupted merge's work is the user's: a plain rerun never throws it away.
        if (!restart && is_our_staging(staging))
            throw Error(staging + ": an interrupted merge into " + target + " left this staging folder (kept); rerun "
                        "with --resume to continue it (its blocks are checked), or with --restart to discard it and "
                        "merge from the start");
        discard_earlier_staging(target);
        state.note = "discarded the staging folder of an earlier, unfinished merge (" + staging + ", --restart)";
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
                           const OutputLayout& layout, JournalWriter* journal, bool evict_written,
                           PreviousOutput* previous)
    : staging_(staging), tensors_(tensors), layout_(layout), journal_(journal), evict_written_(evict_written),
      previous_(previous), fds_(layout.files.size(), -1) {}

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

void OutputWriter::write(size_t tensor, int64_t row_begin, int64_t row_end, const unsigned char* data, size_t size,
                         std::optional<uint64_t> xxh64) {
    const TensorLocation& where = layout_.locations[tensor];
    const uint64_t offset = where.offset + static_cast<uint64_t>(row_begin) * row_bytes(tensors_[tensor]);
    if (previous_ && previous_->same_as_previous(where.file, offset, data, size)) {
        // Filled from the previous output after the copy (its bytes are these), or linked whole.
        if (journal_)
            journal_->append({tensor, row_begin, row_end, where.file, offset, size,
                              xxh64 ? *xxh64 : vmerge::xxh64(data, size)});
        return;
    }
    const std::string path = staging_ + "/" + layout_.files[where.file].name;
    const int fd = fd_for(where.file);
    // Hashed piece by piece just before each piece is written: the piece is then in the CPU
    // cache for the write, instead of the whole block being read from memory twice.
    std::optional<Xxh64Stream> hash;  // only where the block came without its hash
    if (journal_ && !xxh64) hash.emplace();
    for (size_t done = 0; done < size;) {
        const size_t n = std::min(kWritePiece, size - done);
        if (hash) hash->update(data + done, n);
        pwrite_all(fd, data + done, n, offset + done, path);
        done += n;
    }
    if (!journal_) return;
    // Start writing back now, so the disk works while the next blocks are read and the batch's
    // fdatasync finds little left to do (a hint: where a file system does not take it, the
    // fdatasync does the work).
    ::sync_file_range(fd, static_cast<off_t>(offset), static_cast<off_t>(size), SYNC_FILE_RANGE_WRITE);
    if (pending_.empty()) pending_since_ = Clock::now();
    pending_.push_back({tensor, row_begin, row_end, where.file, offset, size, hash ? hash->digest() : *xxh64});
    pending_bytes_ += size;
    if (pending_bytes_ >= kDurableBatchBytes || seconds_since(pending_since_) >= kDurableBatchSeconds) make_durable();
}

// The pending blocks' files fdatasync'ed, then the blocks journaled: a journaled block is on disk.
void OutputWriter::make_durable() {
    std::set<size_t> files;
    for (const WrittenBlock& block : pending_) files.insert(block.file);
    for (size_t file : files)
        if (::fdatasync(fd_for(file)) != 0)
            throw Error(staging_ + "/" + layout_.files[file].name + ": fdatasync failed: " + errno_text());
    for (const WrittenBlock& block : pending_) {
        // Written once and durable: out of the page cache when the merge does not fit in memory.
        if (evict_written_ && block.length >= (1u << 20))
            ::posix_fadvise(fd_for(block.file), static_cast<off_t>(block.offset), static_cast<off_t>(block.length),
                            POSIX_FADV_DONTNEED);
        journal_->append(block);
    }
    pending_.clear();
    pending_bytes_ = 0;
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
    if (journal_ && !pending_.empty()) make_durable();
    for (size_t f = 0; f < fds_.size(); ++f) {
        if (fds_[f] < 0) continue;
        if (::fsync(fds_[f]) != 0)
            throw Error(staging_ + "/" + layout_.files[f].name + ": fsync failed: " + errno_text());
        ::close(fds_[f]);
        fds_[f] = -1;
    }
}

std::vector<std::string> commit_staging(const std::string& target, bool force, const std::string& hf_dir,
                                        const HfFilePlan& hf, const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                                        const std::map<std::string, std::string>& generated_files) {
    const std::string staging = staging_path(target);
    // The ranks wrote into the staging folder through open files: if it is gone from its place
    // now (its parent moved or removed meanwhile), its journal cannot be read here, and that is
    // what to say, not a journal gap.
    std::error_code ec;
    if (!fs::is_directory(journal_dir(staging), ec))
        throw Error(staging + ": no longer there at the commit (was the target's parent folder moved or removed during "
                              "the merge?); nothing was committed, merge again into a target that stays in place");
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

}  // namespace vmerge
