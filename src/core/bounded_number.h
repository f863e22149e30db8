#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vmerge {

// Limits for numbers read from checkpoint files, their names and the command line: above
// anything a real model or cluster has, low enough that the memory and time a number
// drives (tensor tables, loops over ranks or layers) stay bounded.
inline constexpr int64_t kMaxLayers = 100'000;              // decoder layers of one model
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;  // ranks of a checkpoint or a plan
inline constexpr int64_t kMaxExperts = int64_t{1} << 20;    // MoE experts of one layer
inline constexpr int64_t kMaxVocab = int64_t{1} << 31;      // vocabulary rows
inline constexpr int64_t kMaxIteration = 999'999'999;       // Megatron-LM iteration numbers

// `text` as a whole decimal number within [lo, hi]: digits, with a leading '-' only when lo
// is negative, nothing else (no spaces, signs, or trailing text). nullopt otherwise,
// including a number too large for 64 bits.
std::optional<int64_t> parse_int_within(std::string_view text, int64_t lo, int64_t hi);

// The same, or Error "<source> '<text>': expected a whole number from lo to hi".
// `source` names where the text came from: "<file>: tracker", "--np", "<file name>: rank".
int64_t parse_bounded_int(std::string_view text, int64_t lo, int64_t hi, const std::string& source);

// A number already read (from JSON, a pickle, a flag) within [lo, hi], or Error
// "<source> <value>: expected lo..hi".
int64_t require_within(int64_t value, int64_t lo, int64_t hi, const std::string& source);

// Exactly 16 hex digits (a checksum as hex64 writes it), or nullopt.
std::optional<uint64_t> parse_hex64(std::string_view text);

// Largest write journal read back on --resume (one ~80-byte line per written block).
inline constexpr uint64_t kMaxJournalBytes = uint64_t{1} << 30;

// "lo..hi" for messages.
std::string range_text(int64_t lo, int64_t hi);

}  // namespace vmerge
