#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace vmerge {

// nlohmann's message without its "[json.exception.type_error.302] " prefix; with
// JSON_DIAGNOSTICS (set for every target) it starts with the value's place, "(/peft_type)".
std::string json_error_text(const nlohmann::json::exception& e);

// Runs `interpret` over a JSON document read from `path`: a value of another type than the code
// takes, or a missing key, becomes Error "<path>: unexpected JSON: (/key) type must be ...".
template <typename F>
decltype(auto) interpret_json(const std::string& path, F&& interpret) {
    try {
        return interpret();
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": unexpected JSON: " + json_error_text(e));
    }
}

// Parses the JSON document `text` read from `path`; Error "<path>: not valid JSON: ..." otherwise.
nlohmann::json parse_json_text(const std::string& text, const std::string& path);

// The same for a file, read through InputFile (a regular file only, at most kMaxJsonBytes).
nlohmann::json read_json_file(const std::string& path);

// A JSON whole number within [lo, hi], or Error "<source> <value>: expected lo..hi" (also for
// a fraction, a string, or a number beyond 64 bits). `source` names file and key.
int64_t json_int_within(const nlohmann::json& value, int64_t lo, int64_t hi, const std::string& source);

}  // namespace vmerge
