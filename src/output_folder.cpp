#include "vmerge/output_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "vmerge/checksum.h"
#include "vmerge/error.h"
#include "vmerge/input_file.h"
#include "vmerge/rank_work.h"

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

StagingState prepare_staging(const std::string& target, bool force, bool resume, const OutputLayout& layout,
                             const ResumeIdentity& identity) {
    std::error_code ec;
    if (fs::exists(target, ec) && !force)
        throw Error(target + ": already exists; pass --force to replace it");
    const std::string staging = staging_path(target);
    StagingState state;
    if (fs::exists(staging, ec)) {
        if (resume) {
            check_resume_identity(staging, identity);
            state.resumed = true;
            state.note = "resuming the interrupted merge in " + staging;
            return state;
        }
        state.note = "discarded the staging folder of an earlier, unfinished merge (" + staging +
                     "); --resume would have continued it";
        fs::remove_all(staging, ec);
    } else if (resume) {
        state.note = "nothing to resume (no " + staging + "): merging from the start";
    }
    fs::create_directories(staging, ec);
    if (ec) throw Error(staging + ": cannot create the staging folder: " + ec.message());
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

std::vector<std::string> non_weight_files(const std::string& hf_dir) {
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(hf_dir, ec)) return out;
    for (auto it = fs::recursive_directory_iterator(hf_dir); it != fs::recursive_directory_iterator(); ++it) {
        // A FIFO, device or socket is refused, not skipped: the output would silently lack it.
        const fs::file_type type = it->status().type();
        if (type == fs::file_type::fifo || type == fs::file_type::character || type == fs::file_type::block ||
            type == fs::file_type::socket)
            require_regular_file(it->path().string());
        if (!it->is_regular_file()) continue;
        const std::string name = it->path().filename().string();
        if (is_weight_file(name)) continue;
        out.push_back(fs::relative(it->path(), hf_dir).string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

void commit_staging(const std::string& target, bool force, const std::string& hf_dir,
                    const std::vector<OutputTensor>& tensors, const OutputLayout& layout,
                    const std::map<std::string, std::string>& generated_files) {
    const std::string staging = staging_path(target);
    for (const std::string& rel : non_weight_files(hf_dir)) {
        if (generated_files.count(rel)) continue;
        const fs::path to = fs::path(staging) / rel;
        fs::create_directories(to.parent_path());
        std::error_code ec;
        fs::copy_file(fs::path(hf_dir) / rel, to, fs::copy_options::overwrite_existing, ec);
        if (ec) throw Error(hf_dir + "/" + rel + ": cannot copy: " + ec.message());
        fsync_path(to.string(), false);
    }
    for (const auto& [rel, text] : generated_files) write_durable((fs::path(staging) / rel).string(), text, "");
    write_durable(staging + "/" + kChecksumsFile, checksums_json(layout, read_journals(staging)), " the checksums");
    std::error_code ec;
    fs::remove_all(journal_dir(staging), ec);
    if (layout.model_files > 1)
        write_durable(staging + "/model.safetensors.index.json", index_json(tensors, layout), " the index");
    move_into_place(staging, target, force);
}

void fsync_path(const std::string& path, bool directory) {
    int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

void write_durable(const std::string& path, const std::string& bytes, const std::string& what) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    out.close();
    if (!out) throw Error(path + ": cannot write" + what);
    fsync_path(path, false);
}

void move_into_place(const std::string& staging, const std::string& target, bool force) {
    fsync_path(staging, true);
    std::error_code ec;
    std::string old;
    if (fs::exists(target, ec)) {
        if (!force) throw Error(target + ": appeared during the merge; pass --force to replace it");
        old = staging + ".old";
        fs::remove_all(old, ec);
        fs::rename(target, old, ec);
        if (ec) throw Error(target + ": cannot move the old folder aside: " + ec.message());
    }
    fs::rename(staging, target, ec);
    if (ec) throw Error(target + ": cannot move the merged folder into place: " + ec.message());
    fsync_path(fs::path(target).lexically_normal().parent_path().string(), true);
    if (!old.empty()) fs::remove_all(old, ec);
}

void discard_staging(const std::string& target) {
    std::error_code ec;
    fs::remove_all(staging_path(target), ec);
}

}  // namespace vmerge
