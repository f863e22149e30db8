#include "output/safetensors/previous_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/human_units.h"
#include "output/output_folder.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

constexpr size_t kCompareChunk = 4u << 20;  // bytes of the previous file read at once

std::string errno_text() { return std::strerror(errno); }

// All `size` bytes at `offset`; false at an early end of file.
bool pread_all(int fd, unsigned char* out, size_t size, uint64_t offset) {
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

// The previous file `path` opened for reading when it can stand in for `file`: a regular file
// (not a link) of the planned size that starts with the planned header; -1 otherwise.
int open_if_same_layout(const std::string& path, const OutputFile& file) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st {};
    std::string header(file.header.size(), '\0');
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == file.size &&
        pread_all(fd, reinterpret_cast<unsigned char*>(header.data()), header.size(), 0) && header == file.header)
        return fd;
    ::close(fd);
    return -1;
}

void copy_range(int from, int to, uint64_t offset, uint64_t length, std::vector<unsigned char>& buffer,
                const std::string& from_path, const std::string& to_path) {
    for (uint64_t done = 0; done < length;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(kCompareChunk, length - done));
        buffer.resize(n);
        if (!pread_all(from, buffer.data(), n, offset + done))
            throw Error(from_path + ": shorter than when this merge compared it (changed during the merge?)");
        pwrite_all(to, buffer.data(), n, offset + done, to_path);
        done += n;
    }
}

// `from` copied whole into `to` (a new file), durably: where a hard link cannot be made.
void copy_whole_file(const std::string& from, const std::string& to, uint64_t size) {
    const int in = ::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) throw Error(from + ": cannot open: " + errno_text());
    const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0) {
        ::close(in);
        throw Error(to + ": cannot create: " + errno_text());
    }
    std::vector<unsigned char> buffer;
    try {
        copy_range(in, out, 0, size, buffer, from, to);
        if (::fsync(out) != 0) throw Error(to + ": fsync failed: " + errno_text());
    } catch (...) {
        ::close(in);
        ::close(out);
        throw;
    }
    ::close(in);
    ::close(out);
}

// The identity of an open previous file: a file replaced or edited after its blocks were
// compared has another inode or modification time.
std::string file_identity(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return "?";
    return std::to_string(static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec) + ":" +
           std::to_string(st.st_ino);
}

}  // namespace

void check_reusable(const std::string& dir, const std::string& target) {
    const ExistingTarget previous = classify_target(dir);
    if (previous.kind != TargetKind::VmergeOutput)
        throw Error("--reuse " + dir + ": not a folder vmerge wrote (" +
                    (previous.kind == TargetKind::Other ? previous.reason : std::string("absent or empty")) +
                    "); pass an earlier merge's --target_dir");
    std::error_code ec;
    if (fs::equivalent(dir, target, ec))
        throw Error("--reuse " + dir + " is the target itself; reuse an earlier step's output into a new --target_dir");
}

PreviousOutput::PreviousOutput(const std::string& dir, const std::string& staging, const OutputLayout& layout)
    : dir_(dir), staging_(staging), layout_(layout), files_(layout.files.size()),
      unchanged_(layout.files.size(), false) {}

PreviousOutput::~PreviousOutput() {
    for (const File& f : files_)
        if (f.fd >= 0) ::close(f.fd);
}

bool PreviousOutput::same_as_previous(size_t file, uint64_t offset, const unsigned char* data, size_t size) {
    File& f = files_.at(file);
    if (!f.opened) {  // on first use: a rank opens only the previous files it writes into
        f.opened = true;
        f.fd = open_if_same_layout(dir_ + "/" + layout_.files[file].name, layout_.files[file]);
        f.changed = f.fd < 0;
        if (f.fd >= 0) f.identity = file_identity(f.fd);
    }
    bool same = !f.changed;
    for (size_t done = 0; same && done < size; done += kCompareChunk) {
        const size_t n = std::min(kCompareChunk, size - done);
        previous_bytes_.resize(n);
        same = pread_all(f.fd, previous_bytes_.data(), n, offset + done) &&
               std::memcmp(previous_bytes_.data(), data + done, n) == 0;
    }
    if (same) {
        f.skipped.emplace_back(offset, size);
        f.skipped_bytes += size;
        return true;
    }
    f.changed = true;  // from now on its blocks are written without comparing
    f.wrote = true;
    written_bytes_ += size;
    return false;
}

std::string PreviousOutput::reuse_state() const {
    // One letter per file: w (this rank wrote a block of it), s (it skipped blocks only), - (none).
    std::string state;
    uint64_t skipped = 0;
    for (const File& f : files_) {
        state += f.wrote ? 'w' : f.skipped.empty() ? '-' : 's';
        skipped += f.skipped_bytes;
    }
    state += " " + std::to_string(written_bytes_) + " " + std::to_string(skipped);
    for (const File& f : files_) state += " " + (f.identity.empty() ? std::string("-") : f.identity);
    return state;
}

std::vector<std::string> PreviousOutput::complete(const std::vector<std::string>& states) {
    std::vector<bool> written(files_.size(), false), skipped(files_.size(), false);
    uint64_t bytes_written = 0, bytes_skipped = 0;
    for (const std::string& s : states) {
        std::istringstream in(s);
        std::string letters;
        uint64_t w = 0, k = 0;
        if (!(in >> letters >> w >> k) || letters.size() != files_.size())
            throw Error("internal: a rank's --reuse state is malformed: " + s);
        for (size_t f = 0; f < files_.size(); ++f) {
            written[f] = written[f] || letters[f] == 'w';
            skipped[f] = skipped[f] || letters[f] == 's';
            std::string seen;
            if (!(in >> seen)) throw Error("internal: a rank's --reuse state is malformed: " + s);
            if (seen == "-") continue;
            if (!files_[f].identity.empty() && files_[f].identity != seen)
                throw Error(dir_ + "/" + layout_.files[f].name + ": changed while the merge compared it (ranks saw "
                            "different modification times or inodes); rerun without --reuse");
            files_[f].identity = seen;
        }
        bytes_written += w;
        bytes_skipped += k;
    }
    size_t linked = 0;
    uint64_t linked_bytes = 0;
    for (size_t f = 0; f < files_.size(); ++f) {
        unchanged_[f] = !written[f] && skipped[f];
        if (unchanged_[f]) {
            ++linked;
            linked_bytes += layout_.files[f].size - layout_.files[f].header.size();
        } else if (!files_[f].skipped.empty()) {
            copy_skipped(f);
        }
    }
    return {"reused " + dir_ + ": " + std::to_string(linked) + " of " + std::to_string(files_.size()) +
            " files unchanged (" + human_bytes(linked_bytes) + ", hard-linked), " +
            human_bytes(bytes_skipped > linked_bytes ? bytes_skipped - linked_bytes : 0) +
            " of unchanged blocks copied into changed files, " +
            human_bytes(bytes_written) + " written"};
}

void PreviousOutput::copy_skipped(size_t file) {
    const std::string from = dir_ + "/" + layout_.files[file].name, to = staging_ + "/" + layout_.files[file].name;
    const int out = ::open(to.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (out < 0) throw Error(to + ": cannot open for writing: " + errno_text());
    try {
        for (const auto& [offset, length] : files_[file].skipped)
            copy_range(files_[file].fd, out, offset, length, previous_bytes_, from, to);
        if (::fdatasync(out) != 0) throw Error(to + ": fdatasync failed: " + errno_text());
    } catch (...) {
        ::close(out);
        throw;
    }
    ::close(out);
}

void PreviousOutput::link_unchanged() {
    for (size_t f = 0; f < files_.size(); ++f) {
        if (!unchanged_[f]) continue;
        const OutputFile& file = layout_.files[f];
        const std::string from = dir_ + "/" + file.name, to = staging_ + "/" + file.name;
        // Checked again right before, and the file checked is the one linked (through its open
        // descriptor): the staging file holds no data of it, only the link will.
        const int fd = open_if_same_layout(from, file);
        if (fd < 0 || file_identity(fd) != files_[f].identity) {
            if (fd >= 0) ::close(fd);
            throw Error(from + ": changed during the merge (size, header, modification time or inode); rerun without --reuse");
        }
        fs::remove(to);
        const std::string opened = "/proc/self/fd/" + std::to_string(fd);
        const bool linked = ::linkat(AT_FDCWD, opened.c_str(), AT_FDCWD, to.c_str(), AT_SYMLINK_FOLLOW) == 0 ||
                            (errno == ENOENT && ::link(from.c_str(), to.c_str()) == 0);  // no /proc
        const int link_errno = errno;
        ::close(fd);
        if (linked) continue;
        if (link_errno != EXDEV && link_errno != EPERM && link_errno != EMLINK)
            throw Error(to + ": cannot hard-link " + from + ": " + std::strerror(link_errno));
        copy_whole_file(from, to, file.size);
    }
}

}  // namespace vmerge
