#pragma once
#include <cstdint>
#include <string>

namespace vmerge {

// A read-only file read by exact ranges (pread). Every range is checked against the file
// size first, so a truncated or lying file gives an Error naming the path and offset.
class InputFile {
public:
    explicit InputFile(const std::string& path);
    ~InputFile();
    InputFile(const InputFile&) = delete;
    InputFile& operator=(const InputFile&) = delete;
    InputFile(InputFile&& other) noexcept;
    InputFile& operator=(InputFile&& other) noexcept;

    const std::string& path() const { return path_; }
    uint64_t size() const { return size_; }
    // Reads exactly `length` bytes at `offset` into `out`; throws Error on a short read or
    // a range outside the file. `what` says what was being read, for the message.
    void read_exact(uint64_t offset, void* out, uint64_t length, const char* what = "data") const;
    // Tells the kernel these bytes will not be read again (posix_fadvise DONTNEED): a merge
    // reads every byte once, and a checkpoint larger than RAM should not evict everything else.
    void drop_cache(uint64_t offset, uint64_t length) const;

private:
    std::string path_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

}  // namespace vmerge
