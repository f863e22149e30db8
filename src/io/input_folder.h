#pragma once
#include <string>

namespace vmerge {

// A folder the user named (--local_dir, --root, --hf_config): "PATH: does not exist" for a
// typo, "PATH: is a file, not a folder" otherwise, each followed by what the flag is for.
void require_input_folder(const std::string& path, const std::string& what);

}  // namespace vmerge
