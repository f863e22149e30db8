#include "io/input_file.h"
#include "io/read_once.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "core/error.h"
#include "io/input_tree.h"
#include "io/s3_client.h"

namespace vmerge {

// The bytes of an object from `offset` on, kept after a small read: the scan of a torch ZIP
// reads each record's 30-byte header and then its name right after it, two requests that one
// window answers.
struct InputFile::ObjectWindow {
    std::mutex mutex;
    uint64_t offset = 0;
    std::vector<char> bytes;
};

namespace {

// Reads shorter than this fetch this many bytes (or to the end of the object) into the window:
// a few KiB more per record header read, against a round trip per read saved.
constexpr uint64_t kObjectWindowBytes = 4096;

std::string range_text(uint64_t offset, uint64_t length) {
    return std::to_string(length) + " bytes at offset " + std::to_string(offset);
}

std::string not_regular(const std::string& path, unsigned mode) {
    return path + ": " + file_kind(mode) + ", not a regular file (vmerge reads only regular files)";
}

}  // namespace

std::string file_kind(unsigned mode) {
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISREG(mode)) return "a regular file";
    return "an unknown kind of file";
}

InputFile::InputFile(const std::string& path) : path_(path) {
    if (is_object_url(path)) {
        object_ = parse_object_url(path);
        const auto listed = listed_object_size(path);
        size_ = listed ? *listed : s3_client().object_size(object_);
        window_ = std::make_shared<ObjectWindow>();
        return;
    }
    // O_NONBLOCK: open() of a FIFO returns at once instead of waiting for a writer; the
    // type check below then refuses it. A regular file ignores the flag, so reads are as usual.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd_ < 0) {
        throw Error(path + ": cannot open for reading: " + std::strerror(errno));
    }
    struct stat info {};
    if (::fstat(fd_, &info) != 0) {
        const int saved_errno = errno;
        ::close(fd_);
        throw Error(path + ": cannot stat: " + std::strerror(saved_errno));
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd_);
        fd_ = -1;
        throw Error(not_regular(path, info.st_mode));
    }
    size_ = static_cast<uint64_t>(info.st_size);
}

bool same_bytes(const InputFile& a, uint64_t offset_a, const InputFile& b, uint64_t offset_b, uint64_t length) {
    constexpr uint64_t kChunk = uint64_t{4} << 20;
    std::vector<char> x, y;
    for (uint64_t done = 0; done < length; done += kChunk) {
        const uint64_t n = std::min(kChunk, length - done);
        x.resize(n);
        y.resize(n);
        a.read_exact(offset_a + done, x.data(), n, "comparison");
        b.read_exact(offset_b + done, y.data(), n, "comparison");
        if (x != y) return false;
    }
    return true;
}

std::string read_small_file(const std::string& path, uint64_t max_bytes, const char* what) {
    return read_once(path, [&] {
        const InputFile file(path);
        if (file.size() > max_bytes)
            throw Error(path + ": " + std::to_string(file.size()) + " bytes, more than the " + std::to_string(max_bytes) +
                        " bytes " + what + " may hold");
        std::string text(file.size(), '\0');
        file.read_exact(0, text.data(), text.size(), what);
        return text;
    });
}

void require_no_special_files(const std::string& dir) {
    if (is_object_url(dir)) return;  // a store holds only objects
    namespace fs = std::filesystem;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        std::error_code status_ec;  // a dangling link: not this check's business
        const fs::file_type type = it->status(status_ec).type();
        if (type == fs::file_type::fifo || type == fs::file_type::character || type == fs::file_type::block ||
            type == fs::file_type::socket)
            require_regular_file(it->path().string());
    }
}

void require_regular_file(const std::string& path) {
    if (is_object_url(path)) {
        if (entry_kind(path) != EntryKind::file) throw Error(path + ": no such object (a folder or missing)");
        return;
    }
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(info.st_mode)) throw Error(not_regular(path, info.st_mode));
}

InputFile::~InputFile() {
    if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)),
      object_(std::move(other.object_)),
      window_(std::move(other.window_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        path_ = std::move(other.path_);
        object_ = std::move(other.object_);
        window_ = std::move(other.window_);
        fd_ = std::exchange(other.fd_, -1);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void InputFile::check_range(uint64_t offset, uint64_t length, const char* what) const {
    if (fd_ < 0 && object_.bucket.empty()) {
        throw Error(path_ + ": cannot read " + what + " (" + range_text(offset, length) +
                    "): the file is not open");
    }
    if (offset > size_ || length > size_ - offset) {
        throw Error(path_ + ": cannot read " + what + " (" + range_text(offset, length) +
                    "): the range ends past the end of the file (size " + std::to_string(size_) +
                    ")");
    }
}

void InputFile::read_exact(uint64_t offset, void* out, uint64_t length, const char* what) const {
    iovec whole{out, static_cast<size_t>(length)};
    read_scattered(offset, &whole, 1, what);
}

void InputFile::read_scattered(uint64_t offset, iovec* pieces, size_t count, const char* what) const {
    uint64_t length = 0;
    for (size_t i = 0; i < count; ++i) length += pieces[i].iov_len;
    check_range(offset, length, what);
    if (!object_.bucket.empty()) return read_object(offset, pieces, count, length, what);
    uint64_t done = 0;
    size_t first = 0;
    while (first < count && pieces[first].iov_len == 0) ++first;
    while (first < count) {
        const int n = static_cast<int>(std::min<size_t>(count - first, IOV_MAX));
        const ssize_t got = ::preadv(fd_, pieces + first, n, static_cast<off_t>(offset + done));
        if (got < 0) {
            if (errno == EINTR) continue;
            throw Error(path_ + ": cannot read " + what + " (" + range_text(offset, length) +
                        "): " + std::strerror(errno));
        }
        if (got == 0) {
            // The size came from fstat at open; a file truncated since then ends early.
            throw Error(path_ + ": cannot read " + what + " (" + range_text(offset, length) +
                        "): the file ended after " + std::to_string(done) +
                        " bytes (was it truncated while being read?)");
        }
        done += static_cast<uint64_t>(got);
        // Step past what was read: whole pieces, then into a piece read in part.
        auto left = static_cast<size_t>(got);
        while (first < count && left >= pieces[first].iov_len) left -= pieces[first++].iov_len;
        if (left > 0) {
            pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + left;
            pieces[first].iov_len -= left;
        }
        while (first < count && pieces[first].iov_len == 0) ++first;
    }
}

// One ranged GET for the whole range (a request per piece would multiply the requests), into
// the one piece directly or through a buffer scattered afterwards.
void InputFile::read_object(uint64_t offset, iovec* pieces, size_t count, uint64_t length, const char* what) const {
    if (length == 0) return;
    try {
        if (count == 1 && length < kObjectWindowBytes) {
            std::lock_guard lock(window_->mutex);
            auto& w = *window_;
            if (offset < w.offset || offset + length > w.offset + w.bytes.size()) {
                w.bytes.resize(std::min<uint64_t>(kObjectWindowBytes, size_ - offset));
                w.offset = offset;
                s3_client().read_range(object_, offset, w.bytes.data(), w.bytes.size());
            }
            std::memcpy(pieces[0].iov_base, w.bytes.data() + (offset - w.offset), length);
            return;
        }
        if (count == 1) return s3_client().read_range(object_, offset, pieces[0].iov_base, length);
        std::vector<char> buffer(length);
        s3_client().read_range(object_, offset, buffer.data(), length);
        uint64_t done = 0;
        for (size_t i = 0; i < count; ++i) {
            std::memcpy(pieces[i].iov_base, buffer.data() + done, pieces[i].iov_len);
            done += pieces[i].iov_len;
        }
    } catch (const Error& e) {
        throw Error(std::string(e.what()) + " (reading " + what + ")");
    }
}

void InputFile::will_need(uint64_t offset, uint64_t length) const {
    if (fd_ < 0) return;
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
}

void InputFile::drop_cache(uint64_t offset, uint64_t length) const {
    if (fd_ < 0) return;
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
}

}  // namespace vmerge
