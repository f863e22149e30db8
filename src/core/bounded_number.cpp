#include "core/bounded_number.h"

#include <cctype>
#include <charconv>

#include "core/error.h"

namespace vmerge {

std::optional<int64_t> parse_int_within(std::string_view text, int64_t lo, int64_t hi) {
    const bool negative = !text.empty() && text.front() == '-';
    const std::string_view digits = negative ? text.substr(1) : text;
    // from_chars alone would take "-" for a negative bound's text only; require digits.
    if (digits.empty() || (negative && lo >= 0)) return std::nullopt;
    for (char c : digits)
        if (c < '0' || c > '9') return std::nullopt;
    int64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;  // beyond 64 bits
    if (value < lo || value > hi) return std::nullopt;
    return value;
}

std::optional<uint64_t> parse_hex64(std::string_view text) {
    if (text.size() != 16) return std::nullopt;
    for (char c : text)
        if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    uint64_t value = 0;
    std::from_chars(text.data(), text.data() + text.size(), value, 16);
    return value;
}

std::string range_text(int64_t lo, int64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

int64_t parse_bounded_int(std::string_view text, int64_t lo, int64_t hi, const std::string& source) {
    if (auto value = parse_int_within(text, lo, hi)) return *value;
    // Long garbage (a binary file where a number belongs) is cut for the message.
    const std::string shown = text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text);
    throw Error(source + " '" + shown + "': expected a whole number " + range_text(lo, hi));
}

int64_t require_within(int64_t value, int64_t lo, int64_t hi, const std::string& source) {
    if (value < lo || value > hi) throw Error(source + " " + std::to_string(value) + ": expected " + range_text(lo, hi));
    return value;
}

}  // namespace vmerge
