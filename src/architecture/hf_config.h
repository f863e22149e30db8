#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"

namespace vmerge {

// The parts of a Hugging Face config.json that change how a merge is written.
struct HfConfig {
    std::string dir;
    nlohmann::json json;
    std::string text;  // config.json as read (its key order is kept when the output rewrites it)
    std::optional<DType> dtype;  // "dtype" (transformers >= 4.56) or "torch_dtype"
    bool tie_word_embeddings = false;
    std::vector<std::string> architectures;
};

// Reads <dir>/config.json; a missing file is an Error naming it.
HfConfig load_hf_config(const std::string& dir);

// load_hf_config in two halves, so one rank can read the file and every rank parse it:
// the text of <dir>/config.json (after checking that the folder, copied into the output,
// holds no FIFO or device), and the config that text states.
std::string read_hf_config_text(const std::string& dir);
HfConfig parse_hf_config(const std::string& dir, const std::string& text);

// The one way to read an integer of config.json: key `key` as a whole number within the
// bounds config_int_bounds gives it, else Error "<dir>/config.json: <key> <value>: expected
// lo..hi". A missing (or null) key is `fallback`, or an Error naming the key without one.
int64_t config_int(const HfConfig& config, const std::string& key, std::optional<int64_t> fallback = std::nullopt);

// The text model's integer `key`: text_config.<key> where config.json nests the text model's
// sizes there (transformers 5's vision-language configs), else config_int's <key>.
int64_t text_config_int(const HfConfig& config, const std::string& key, std::optional<int64_t> fallback = std::nullopt);

// The [lo, hi] a config.json integer key must lie in (a logic error for a key not listed:
// every key vmerge reads has its bounds here).
std::pair<int64_t, int64_t> config_int_bounds(const std::string& key);
// The same for any key: nullopt for one not listed (a tensor set's expressions read keys of
// every family; the listed ones keep their bounds there too).
std::optional<std::pair<int64_t, int64_t>> known_config_int_bounds(const std::string& key);

}  // namespace vmerge
