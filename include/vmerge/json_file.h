#pragma once
#include <istream>
#include <string>

#include <nlohmann/json.hpp>

namespace vmerge {

// Parses the JSON document `in` read from `path`; Error "<path>: not valid JSON: ..." otherwise.
nlohmann::json parse_json(std::istream& in, const std::string& path);

// The same for a file (a missing or unreadable file is "not valid JSON" too).
nlohmann::json read_json_file(const std::string& path);

}  // namespace vmerge
