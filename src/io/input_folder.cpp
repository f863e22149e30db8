#include "io/input_folder.h"

#include <filesystem>

#include "core/error.h"

namespace vmerge {
namespace fs = std::filesystem;

void require_input_folder(const std::string& path, const std::string& what) {
    std::error_code ec;
    const auto status = fs::status(path, ec);
    const std::string why = what.empty() ? "" : " (" + what + ")";
    if (status.type() == fs::file_type::not_found) throw Error(path + ": does not exist" + why);
    if (ec) throw Error(path + ": cannot be read: " + ec.message() + why);
    if (status.type() != fs::file_type::directory) throw Error(path + ": is a file, not a folder" + why);
}

}  // namespace vmerge
