#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vmerge {

// A small file that may be absent, read once (by rank 0) and handed to whoever parses it. A
// read that failed keeps its error, thrown where the file is used, so a merge fails at the
// same point and with the same message as when each reader opened the file itself.
struct SmallFile {
    std::string path;
    bool exists = false;
    std::string text;
    std::string error;  // the read's Error message, empty when it succeeded

    // The text, or the read's Error.
    const std::string& contents() const;
};

// Reads `path` (read_small_file: a regular file of at most `max_bytes`) when it exists.
SmallFile read_small_file_if_present(const std::string& path, uint64_t max_bytes, const char* what);

// Files as one string and back (for a broadcast); deserialize_small_files throws Error on
// text serialize_small_files did not write.
std::string serialize_small_files(const std::vector<SmallFile>& files);
std::vector<SmallFile> deserialize_small_files(const std::string& text);

}  // namespace vmerge
