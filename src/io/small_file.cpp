#include "io/small_file.h"

#include <exception>
#include <filesystem>

#include "core/error.h"
#include "io/input_tree.h"
#include "io/input_file.h"

namespace vmerge {

const std::string& SmallFile::contents() const {
    if (!error.empty()) throw Error(error);
    return text;
}

SmallFile read_small_file_if_present(const std::string& path, uint64_t max_bytes, const char* what) {
    SmallFile file;
    file.path = path;
    std::error_code ec;
    file.exists = path_exists(path);
    if (!file.exists) return file;
    try {
        file.text = read_small_file(path, max_bytes, what);
    } catch (const std::exception& e) {
        file.error = e.what();
        if (file.error.empty()) file.error = path + ": cannot read it";
    }
    return file;
}

namespace {

// Each field as its decimal length, ':', then its bytes.
void put(std::string& out, const std::string& field) { out += std::to_string(field.size()) + ":" + field; }

std::string take(const std::string& in, size_t& pos) {
    const size_t colon = in.find(':', pos);
    if (colon == std::string::npos || colon == pos || colon - pos > 12 ||
        in.find_first_not_of("0123456789", pos) < colon)
        throw Error("small files: malformed message");
    const uint64_t length = std::stoull(in.substr(pos, colon - pos));
    if (length > in.size() - colon - 1) throw Error("small files: malformed message");
    pos = colon + 1 + length;
    return in.substr(colon + 1, length);
}

}  // namespace

std::string serialize_small_files(const std::vector<SmallFile>& files) {
    std::string out;
    for (const auto& f : files) {
        put(out, f.path);
        put(out, f.exists ? "1" : "0");
        put(out, f.text);
        put(out, f.error);
    }
    return out;
}

std::vector<SmallFile> deserialize_small_files(const std::string& text) {
    std::vector<SmallFile> files;
    for (size_t pos = 0; pos < text.size();) {
        SmallFile f;
        f.path = take(text, pos);
        f.exists = take(text, pos) == "1";
        f.text = take(text, pos);
        f.error = take(text, pos);
        files.push_back(std::move(f));
    }
    return files;
}

}  // namespace vmerge
