#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace vmerge {

// What a library call (include/vmerge/vmerge.hpp) receives from a command run through it, beyond
// the text the command prints: the result value (what --log_json and inspect --json say), and a
// progress callback that may cancel the merge. The command itself runs without hooks.
struct CallHooks {
    // Set by merge (the --log_json document) and inspect (the inspect --json document).
    nlohmann::ordered_json result;
    // This rank's bytes written so far out of the merge's total, from the copy; false cancels the
    // merge there: it fails as an interrupted merge does (no target, the staging folder kept for
    // --resume). Called from the writing thread, at most every `interval_ms` and once at the end.
    std::function<bool(uint64_t done, uint64_t total)> progress;
    int interval_ms = 100;
};

// The Error a cancelled merge fails with.
inline constexpr const char* kCancelledMessage = "cancelled by the progress callback";

}  // namespace vmerge
