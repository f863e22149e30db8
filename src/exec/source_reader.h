#pragma once
#include <memory>
#include <string>

#include "core/source_reader.h"

namespace vmerge {

// The default: `file` is a path, read with pread.
std::unique_ptr<SourceReader> open_source_file(const std::string& path);

}  // namespace vmerge
