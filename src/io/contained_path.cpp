#include "io/contained_path.h"

#include <filesystem>

#include "core/error.h"
#include "io/input_tree.h"
#include "io/object_url.h"

namespace vmerge {
namespace fs = std::filesystem;

namespace {

// Why `name` is not a plain relative path; "" when it is.
std::string lexical_problem(const std::string& name) {
    if (name.empty()) return "an empty name";
    if (name.find('\0') != std::string::npos) return "a NUL byte in the name";
    const fs::path p(name);
    if (p.is_absolute() || name.front() == '/') return "an absolute path";
    for (const auto& part : p)
        if (part == ".." || part == "." || part.empty()) return "a '" + part.string() + "' part";
    return "";
}

bool within(const fs::path& inner, const fs::path& outer) {
    auto o = outer.begin();
    auto i = inner.begin();
    for (; o != outer.end(); ++o, ++i)
        if (i == inner.end() || *i != *o) return false;
    return true;
}

}  // namespace

std::string path_inside(const std::string& folder, const std::string& name, const std::string& source) {
    const auto refuse = [&](const std::string& why) {
        std::string shown = name.substr(0, std::min<size_t>(name.find('\0'), 200));
        throw Error(source + ": '" + shown + "': " + why + "; expected a file inside " + folder);
    };
    if (const std::string why = lexical_problem(name); !why.empty()) refuse(why);
    if (is_object_url(folder)) return join_path(folder, name);  // a store has no links
    const fs::path joined = fs::path(folder) / name;
    std::error_code ec;
    if (fs::symlink_status(joined, ec).type() == fs::file_type::not_found) return joined.string();
    const fs::path real_folder = fs::weakly_canonical(folder, ec);
    const fs::path real = fs::weakly_canonical(joined, ec);
    if (ec || !within(real, real_folder)) refuse("a link that leads to " + real.string());
    return joined.string();
}

}  // namespace vmerge
