#pragma once
// The fuzz input as a file: InputFile takes a path, so the bytes go into one memfd per
// process and are read back through /proc/self/fd/N (no disk I/O, no temp files left).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace vmerge_fuzz {

inline const std::string& input_as_file(const uint8_t* data, size_t size) {
    static int fd = -1;
    static std::string path;
    if (fd < 0) {
        fd = ::memfd_create("vmerge-fuzz", MFD_CLOEXEC);
        if (fd < 0) {
            std::perror("memfd_create");
            std::abort();
        }
        path = "/proc/self/fd/" + std::to_string(fd);
    }
    if (::ftruncate(fd, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
        if (n <= 0) std::abort();
        done += static_cast<size_t>(n);
    }
    return path;
}

}  // namespace vmerge_fuzz
