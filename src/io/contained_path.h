#pragma once
#include <string>

namespace vmerge {

// The one way a file name that comes from inside a file is turned into a path: a safetensors
// index's weight_map, a DCP or verl manifest entry, a DeepSpeed `latest` tag, an HDF5 archive's
// copied files, a checksum list that verify follows. The name must be a plain relative path (not
// empty, not absolute, no NUL, no "." or ".." part) and, where it exists, must not reach outside
// `folder` through a link. Returns folder/name; Error "<source>: '<name>': <why>; expected a file
// inside <folder>" otherwise.
std::string path_inside(const std::string& folder, const std::string& name, const std::string& source);

}  // namespace vmerge
