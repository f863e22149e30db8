#include "io/input_folder.h"

#include <filesystem>

#include "core/error.h"
#include "io/input_tree.h"
#include "io/object_url.h"

namespace vmerge {
namespace fs = std::filesystem;

void require_input_folder(const std::string& path, const std::string& what) {
    if (is_object_url(path)) {
        const std::string why = what.empty() ? "" : " (" + what + ")";
        const EntryKind kind = entry_kind(path);
        if (kind == EntryKind::missing) throw Error(path + ": no object has this prefix" + why);
        if (kind == EntryKind::file) throw Error(path + ": is an object, not a folder (a key prefix)" + why);
        return;
    }
    std::error_code ec;
    const auto status = fs::status(path, ec);
    const std::string why = what.empty() ? "" : " (" + what + ")";
    if (status.type() == fs::file_type::not_found) throw Error(path + ": does not exist" + why);
    if (ec) throw Error(path + ": cannot be read: " + ec.message() + why);
    if (status.type() != fs::file_type::directory) throw Error(path + ": is a file, not a folder" + why);
}

}  // namespace vmerge
