#include "io/free_space.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <filesystem>

#include "core/human_units.h"

namespace vmerge {

std::optional<uint64_t> free_bytes(const std::string& dir) {
    struct statvfs fs {};
    if (::statvfs(dir.c_str(), &fs) != 0 || fs.f_frsize == 0) return std::nullopt;
    return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

std::string nearest_existing_folder(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path at = fs::absolute(path, ec).lexically_normal();
    while (!at.empty() && !fs::exists(at, ec) && at != at.parent_path()) at = at.parent_path();
    return at.string();
}

uint64_t allocated_bytes_under(const std::string& dir) {
    namespace fs = std::filesystem;
    uint64_t total = 0;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        struct stat st {};
        if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
    return total;
}

std::string free_space_shortfall(const std::string& dir, uint64_t planned, uint64_t allocated, uint64_t free) {
    const uint64_t needed = planned > allocated ? planned - allocated : 0;
    if (needed <= free) return "";
    std::string message = dir + ": the merge writes " + human_bytes(static_cast<double>(planned)) + " (" +
                          std::to_string(planned) + " bytes)";
    if (allocated > 0) message += ", of which " + human_bytes(static_cast<double>(allocated)) + " are already written,";
    return message + " but its file system has " + human_bytes(static_cast<double>(free)) + " (" + std::to_string(free) +
           " bytes) free; free space or choose another --target_dir (--skip_free_space_check when the file system "
           "reports less than it holds)";
}

}  // namespace vmerge
