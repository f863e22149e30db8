#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace vmerge {

// A small expression over config.json, as an architecture table's tensor set writes its shapes,
// counts and conditions (docs/architecture-tables.md, "Expressions"): integers, true/false,
// 'strings', names of config.json keys (dotted into objects: vision_config.depth), + - * / %,
// comparisons, && || !, `in` (a list holds a value), x[i] (a list's element), a ?? b (b when
// a's key is absent or null, else a), c ? a : b, has(key) (config.json holds key, not null), len(list). Parsed once when the
// table loads; evaluated per tensor with the placeholders bound.
class ConfigExpression {
public:
    struct Node;
    // Error "<where>: '<text>': <what> at column N" on a syntax error.
    static ConfigExpression parse(const std::string& text, const std::string& where);
    const std::string& text() const { return text_; }
    const Node& root() const { return *root_; }

private:
    std::string text_;
    std::shared_ptr<const Node> root_;
};

// A value of an expression: absent (a config.json key that is missing or null, named in
// `missing`), a boolean, an integer, a string, or a list from config.json.
struct ConfigValue {
    enum class Kind { Absent, Bool, Int, String, List } kind = Kind::Absent;
    bool boolean = false;
    int64_t integer = 0;
    std::string string;               // String; Absent: the key that was missing
    const nlohmann::json* list = nullptr;
};

// What names resolve to while an expression is evaluated: the bound placeholders and the
// values vmerge supplies (value_model, mtp_layers, ...), then the table's definitions, then
// config.json's keys. A definition that names itself reads config.json's key of that name
// ("head_dim": "head_dim ?? hidden_size / num_attention_heads").
struct ExpressionScope {
    const nlohmann::json* config = nullptr;
    std::string config_path;  // for messages: "<dir>/config.json"
    const std::map<std::string, ConfigExpression>* definitions = nullptr;
    std::map<std::string, ConfigValue> bound;
};

// Evaluates `e` (Error "<config_path>: <text>: <what>", e.g. no 'moe_intermediate_size', a
// division by zero, an overflow, a type mismatch).
ConfigValue evaluate(const ConfigExpression& e, const ExpressionScope& scope);
int64_t evaluate_int(const ConfigExpression& e, const ExpressionScope& scope);
bool evaluate_bool(const ConfigExpression& e, const ExpressionScope& scope);

ConfigValue int_value(int64_t v);
ConfigValue bool_value(bool v);

}  // namespace vmerge
