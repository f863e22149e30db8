#pragma once
#include <stdexcept>
#include <string>

namespace vmerge {

// Every failure vmerge reports to a user is an Error; its message names the file, the
// offset or key, and what was expected, so it can be printed as it is.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace vmerge
