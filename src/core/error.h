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

// An Error the same inputs give again, whatever is retried: a value the output cannot hold (a
// NaN where a scale is computed, ...). A merge that meets one mid-copy discards its staging
// folder instead of keeping it for a --resume that could only repeat the error.
class DataError : public Error {
public:
    using Error::Error;
};

}  // namespace vmerge
