#include "vmerge/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "vmerge/error.h"

namespace vmerge {

namespace {

std::string range_text(uint64_t offset, uint64_t length) {
    return std::to_string(length) + " bytes at offset " + std::to_string(offset);
}

}  // namespace

InputFile::InputFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
        throw Error(path + ": not a regular file");
    }
    size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() {
    if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(std::exchange(other.size_, 0)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        path_ = std::move(other.path_);
        fd_ = std::exchange(other.fd_, -1);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

void InputFile::read_exact(uint64_t offset, void* out, uint64_t length, const char* what) const {
    if (fd_ < 0) {
        throw Error(path_ + ": cannot read " + what + " (" + range_text(offset, length) +
                    "): the file is not open");
    }
    if (offset > size_ || length > size_ - offset) {
        throw Error(path_ + ": cannot read " + what + " (" + range_text(offset, length) +
                    "): the range ends past the end of the file (size " + std::to_string(size_) +
                    ")");
    }
    auto* cursor = static_cast<char*>(out);
    uint64_t done = 0;
    while (done < length) {
        const ssize_t got =
            ::pread(fd_, cursor + done, length - done, static_cast<off_t>(offset + done));
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
    }
}

void InputFile::drop_cache(uint64_t offset, uint64_t length) const {
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length), POSIX_FADV_DONTNEED);
}

}  // namespace vmerge
