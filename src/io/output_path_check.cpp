#include "io/output_path_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/input_file.h"

namespace vmerge {

void require_writable_output_file(const std::string& path, const std::string& flag) {
    const std::string what = flag + " " + path;
    if (path.empty() || path.back() == '/') throw Error(what + ": expected a file name");
    std::string folder = std::filesystem::path(path).parent_path().string();
    if (folder.empty()) folder = ".";
    struct stat info {};
    if (::stat(folder.c_str(), &info) != 0)
        throw Error(what + ": its folder " + folder + " cannot be used: " + std::strerror(errno));
    if (!S_ISDIR(info.st_mode)) throw Error(what + ": " + folder + " is not a folder");
    if (::access(folder.c_str(), W_OK | X_OK) != 0)
        throw Error(what + ": its folder " + folder + " is not writable: " + std::strerror(errno));
    // An existing file is replaced; a FIFO would block the write, a folder cannot be written.
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode))
        throw Error(what + ": " + file_kind(info.st_mode) + ", not a regular file");
}

}  // namespace vmerge
