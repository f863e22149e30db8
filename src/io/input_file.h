#pragma once
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>

#include "io/object_url.h"

namespace vmerge {

// A read-only file read by exact ranges (pread). Every range is checked against the file
// size first, so a truncated or lying file gives an Error naming the path and offset.
// This is the one way vmerge opens an input: without blocking (open() on a FIFO waits for a
// writer forever, a device never ends), and only a regular file is accepted, so a FIFO, a
// device or a socket in place of a rank file, config.json or tracker is an Error naming it.
// A path "s3://bucket/key" is an object in an S3-compatible store (io/input_tree.h): its size
// comes from its folder's listing (or a HEAD), and each read is one ranged GET.
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
    // Whether this is an object in a store (s3://) rather than a local file.
    bool is_object() const { return !object_.bucket.empty(); }
    // Reads exactly `length` bytes at `offset` into `out`; throws Error on a short read or
    // a range outside the file. `what` says what was being read, for the message.
    void read_exact(uint64_t offset, void* out, uint64_t length, const char* what = "data") const;
    // Reads the bytes from `offset` on into `count` places in memory, in order (preadv), as
    // read_exact does; `pieces` is consumed.
    void read_scattered(uint64_t offset, iovec* pieces, size_t count, const char* what = "data") const;
    // Tells the kernel these bytes will be read soon (posix_fadvise WILLNEED: read ahead now).
    void will_need(uint64_t offset, uint64_t length) const;
    // Tells the kernel these bytes will not be read again (posix_fadvise DONTNEED): a merge
    // reads every byte once, and a checkpoint larger than RAM should not evict everything else.
    void drop_cache(uint64_t offset, uint64_t length) const;

private:
    void check_range(uint64_t offset, uint64_t length, const char* what) const;
    void read_object(uint64_t offset, iovec* pieces, size_t count, uint64_t length, const char* what) const;
    std::string path_;
    ObjectUrl object_;  // bucket empty for a local file
    // An object's last small window (see read_object), shared by the reads of this InputFile.
    struct ObjectWindow;
    std::shared_ptr<ObjectWindow> window_;
    int fd_ = -1;
    uint64_t size_ = 0;
};

// Whether `length` bytes at `offset_a` of `a` equal those at `offset_b` of `b`, read in bounded
// chunks (Error, as read_exact, for a range outside either file).
bool same_bytes(const InputFile& a, uint64_t offset_a, const InputFile& b, uint64_t offset_b, uint64_t length);

// The whole of a small input file (config.json, a tracker, fsdp_config.json), opened as an
// InputFile; Error when it holds more than `max_bytes` (`what` names the kind of file).
std::string read_small_file(const std::string& path, uint64_t max_bytes, const char* what);

// Largest JSON document vmerge parses (an index of a million tensors is ~100 MiB).
inline constexpr uint64_t kMaxJsonBytes = uint64_t{256} << 20;

// For directory listings: Error "<path>: a FIFO, not a regular file" (links followed) unless
// `path` is a regular file, by the same rule as InputFile.
void require_regular_file(const std::string& path);

// For a folder whose files are all read or copied (the Hugging Face config folder): Error
// naming the first FIFO, device or socket found in it or its subfolders (links followed;
// other entries are the business of whoever reads them).
void require_no_special_files(const std::string& dir);

// "a FIFO", "a character device", ...: what a non-regular st_mode is, for messages.
std::string file_kind(unsigned mode);

}  // namespace vmerge
