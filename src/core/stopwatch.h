#pragma once
#include <chrono>

namespace vmerge {

// The clock every timing in the summaries and --log-json is taken with.
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace vmerge
