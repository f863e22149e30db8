#pragma once
#include <string>

namespace vmerge {

// Before a merge starts: the file a flag names (--log_json) can be written when the merge
// ends, so a typo in its folder fails at once instead of after hours of copying, or not at
// all. Error "<flag> <path>: ..." when its folder is missing, not a folder or not writable,
// or the path itself is something other than a regular file (a folder, a FIFO).
void require_writable_output_file(const std::string& path, const std::string& flag);

}  // namespace vmerge
