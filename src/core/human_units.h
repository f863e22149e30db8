#pragma once
#include <string>

namespace vmerge {

// "1.6 MiB", "812 B": sizes for people (powers of 1024).
std::string human_bytes(double bytes);
// "2m41s", "1h03m".
std::string human_duration(double seconds);

}  // namespace vmerge
