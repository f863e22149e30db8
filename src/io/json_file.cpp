#include "io/json_file.h"

#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_file.h"

namespace vmerge {

std::string json_error_text(const nlohmann::json::exception& e) {
    const std::string text = e.what();
    const size_t close = text.starts_with("[json.exception.") ? text.find("] ") : std::string::npos;
    return close == std::string::npos ? text : text.substr(close + 2);
}

nlohmann::json parse_json_text(const std::string& text, const std::string& path) {
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": not valid JSON: " + json_error_text(e));
    }
}

nlohmann::json read_json_file(const std::string& path) {
    return parse_json_text(read_small_file(path, kMaxJsonBytes, "a JSON file"), path);
}

int64_t json_int_within(const nlohmann::json& value, int64_t lo, int64_t hi, const std::string& source) {
    // An unsigned value above INT64_MAX would wrap in get<int64_t>(): compare it unsigned.
    const bool fits = value.is_number_integer() &&
                      (!value.is_number_unsigned() || value.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
    if (!fits) throw Error(source + " " + value.dump() + ": expected a whole number " + range_text(lo, hi));
    return require_within(value.get<int64_t>(), lo, hi, source);
}

}  // namespace vmerge
