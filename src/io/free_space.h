#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace vmerge {

// A merge writes until the file system is full when it does not fit: the planned bytes are
// checked against the free space of the folder they go to before anything is written.

// The bytes an unprivileged writer may still use on `dir`'s file system (statvfs f_bavail);
// nullopt when the file system does not say.
std::optional<uint64_t> free_bytes(const std::string& dir);

// `path` itself when it exists, else its nearest existing parent (where a folder not yet made
// will be).
std::string nearest_existing_folder(const std::string& path);

// The bytes the regular files under `dir` already occupy on disk (a resumed staging folder's
// blocks, which a continued merge overwrites in place).
uint64_t allocated_bytes_under(const std::string& dir);

// The refusal, when `planned` bytes minus those `allocated` already do not fit `free`, naming
// the folder and every number; "" when they fit. Pure.
std::string free_space_shortfall(const std::string& dir, uint64_t planned, uint64_t allocated, uint64_t free);

}  // namespace vmerge
