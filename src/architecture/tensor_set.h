#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "architecture/config_expression.h"
#include "architecture/hf_config.h"
#include "core/tensor_ref.h"

namespace vmerge {

// The HF tensors (names and shapes) a config.json implies: what the output of a merge is
// checked against. Optional ones may be written or not.
struct ExpectedTensors {
    std::map<std::string, Shape> required;
    std::map<std::string, Shape> optional;
};

// One entry of a tensor set: a name pattern whose {placeholders} range over the set's
// `ranges`, its shape as expressions, and when it exists.
struct TensorTemplate {
    size_t index = 0;  // position in the file's "tensors", for messages
    std::string name;
    std::vector<std::string> placeholders;  // in the order the name uses them
    std::vector<ConfigExpression> shape;
    std::optional<ConfigExpression> when;
    bool optional = false;
};

// A condition config.json must meet, with the message that says what is wrong when not.
struct TensorSetCheck {
    ConfigExpression require;
    std::string message;
};

// The "tensor_set" of an 'hf' architecture table (docs/architecture-tables.md): the tensors
// of one HF architecture as data, so a new family is a JSON file. `extends` names the
// architecture whose set this one starts from: its definitions and ranges are overridden by
// this one's of the same name, an entry of the same name pattern replaces the inherited one,
// and checks and new entries are added.
struct TensorSet {
    std::string file;
    std::string extends;
    std::map<std::string, ConfigExpression> definitions;
    std::map<std::string, ConfigExpression> ranges;  // placeholder -> how many values (0..n-1)
    std::vector<TensorSetCheck> checks;
    std::vector<TensorTemplate> tensors;
};

// Parses a table's "tensor_set" (Error "<file>: tensor_set...: ..." naming the entry).
TensorSet parse_tensor_set(const nlohmann::json& j, const std::string& file);

// `child` applied over `parent` (the set `child.extends` names).
TensorSet extend_tensor_set(const TensorSet& parent, const TensorSet& child);

// What vmerge knows besides config.json, bound as names in every expression.
struct TensorSetInputs {
    bool value_model = false;        // `value_model`: a critic's score head instead of lm_head
    int64_t mtp_layers = 0;          // `mtp_layers`: MTP depths written as layers L..L+k-1
    bool mtp_shared_copies = false;  // `mtp_shared_copies`: the release's copies in MTP layers
};

// The tensors `set` gives for `config` (Error naming config.json and the entry on a missing
// key, a failed check, a shape outside 0..2^40, two entries giving one name, or more than
// kMaxExpectedTensors tensors).
ExpectedTensors expand_tensor_set(const TensorSet& set, const HfConfig& config, const TensorSetInputs& inputs);

}  // namespace vmerge
