#include "architecture/tensor_set.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/error.h"

namespace vmerge {
namespace {

// A tensor set grows with layers x experts: bound what one config.json may ask for.
constexpr int64_t kMaxExpectedTensors = int64_t{1} << 20;  // Kimi-K2: 61 x 384 x 3 = 70 k
constexpr int64_t kMaxDim = int64_t{1} << 40;

const std::set<std::string> kSetKeys{"extends", "define", "ranges", "checks", "tensors"};
const std::set<std::string> kEntryKeys{"name", "shape", "when", "optional"};
const std::set<std::string> kCheckKeys{"require", "message"};
// Names vmerge binds itself (TensorSetInputs); a definition or range may not take them.
const std::set<std::string> kBuiltins{"value_model", "mtp_layers", "mtp_shared_copies", "tie_word_embeddings"};

void only_keys(const nlohmann::json& j, const std::set<std::string>& keys, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected an object");
    for (const auto& [key, _] : j.items())
        if (!keys.count(key)) throw Error(where + ": unknown key '" + key + "'");
}

bool is_identifier(const std::string& s) {
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
    for (char c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    return true;
}

ConfigExpression expression(const nlohmann::json& j, const std::string& where) {
    if (j.is_number_integer()) return ConfigExpression::parse(j.dump(), where);
    if (!j.is_string() || j.get<std::string>().empty()) throw Error(where + ": expected an expression (a string) or an integer");
    return ConfigExpression::parse(j.get<std::string>(), where);
}

std::map<std::string, ConfigExpression> expressions_by_name(const nlohmann::json& set, const char* key,
                                                            const std::string& where) {
    std::map<std::string, ConfigExpression> out;
    auto it = set.find(key);
    if (it == set.end()) return out;
    if (!it->is_object()) throw Error(where + "." + key + ": expected an object of name: expression");
    for (const auto& [name, e] : it->items()) {
        const std::string at = where + "." + key + "." + name;
        if (!is_identifier(name) || kBuiltins.count(name)) throw Error(at + ": not a name that may be defined");
        out.emplace(name, expression(e, at));
    }
    return out;
}

std::vector<std::string> name_placeholders(const std::string& name, const std::string& where) {
    std::vector<std::string> found;
    for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open + 1)) {
        const size_t close = name.find('}', open);
        const std::string p = close == std::string::npos ? "" : name.substr(open + 1, close - open - 1);
        if (!is_identifier(p)) throw Error(where + ": '" + name + "': a placeholder is {name}");
        found.push_back(p);
    }
    return found;
}

TensorTemplate parse_entry(const nlohmann::json& j, size_t index, const std::string& where) {
    only_keys(j, kEntryKeys, where);
    TensorTemplate t;
    t.index = index;
    auto name = j.find("name");
    if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) throw Error(where + ": 'name' missing");
    t.name = name->get<std::string>();
    const std::string at = where + " ('" + t.name + "')";
    t.placeholders = name_placeholders(t.name, at);
    auto shape = j.find("shape");
    if (shape == j.end() || !shape->is_array()) throw Error(at + ": 'shape' must be a list of expressions");
    for (const auto& dim : *shape) t.shape.push_back(expression(dim, at + " shape"));
    if (auto w = j.find("when"); w != j.end()) t.when = expression(*w, at + " when");
    if (auto o = j.find("optional"); o != j.end()) {
        if (!o->is_boolean()) throw Error(at + ": 'optional' must be true or false");
        t.optional = o->get<bool>();
    }
    return t;
}

std::vector<TensorSetCheck> parse_checks(const nlohmann::json& set, const std::string& where) {
    std::vector<TensorSetCheck> out;
    auto it = set.find("checks");
    if (it == set.end()) return out;
    if (!it->is_array()) throw Error(where + ".checks: expected a list");
    for (size_t k = 0; k < it->size(); ++k) {
        const std::string at = where + ".checks[" + std::to_string(k) + "]";
        const auto& c = (*it)[k];
        only_keys(c, kCheckKeys, at);
        if (!c.contains("require") || !c.contains("message") || !c["message"].is_string())
            throw Error(at + ": needs 'require' (an expression) and 'message' (a string)");
        out.push_back({expression(c["require"], at + " require"), c["message"].get<std::string>()});
    }
    return out;
}

// Iterates every binding of `names` to 0..count-1 (the last name fastest).
template <class Visit>
void for_each_binding(const std::vector<std::string>& names, const std::vector<int64_t>& counts, ExpressionScope& scope,
                      Visit visit) {
    std::vector<int64_t> at(names.size(), 0);
    for (int64_t c : counts)
        if (c <= 0) return;
    for (;;) {
        for (size_t k = 0; k < names.size(); ++k) scope.bound[names[k]] = int_value(at[k]);
        visit();
        size_t k = names.size();
        while (k > 0 && ++at[k - 1] == counts[k - 1]) at[--k] = 0;
        if (k == 0) return;
    }
}

// A placeholder's text: a bound range value, or a definition's value (an integer or a string:
// "{model}.layers.{i}" with "model": "'model.language_model'").
std::string placeholder_text(const std::string& name, const ExpressionScope& scope, const std::string& where) {
    if (auto it = scope.bound.find(name); it != scope.bound.end()) return std::to_string(it->second.integer);
    const ConfigValue v = evaluate(scope.definitions->at(name), scope);
    if (v.kind == ConfigValue::Kind::Int) return std::to_string(v.integer);
    if (v.kind == ConfigValue::Kind::String && !v.string.empty()) return v.string;
    throw Error(scope.config_path + ": {" + name + "} in '" + where + "' is not an integer or a name");
}

std::string filled(const std::string& pattern, const ExpressionScope& scope) {
    std::string out;
    for (size_t at = 0; at < pattern.size();) {
        const size_t open = pattern.find('{', at);
        if (open == std::string::npos) {
            out += pattern.substr(at);
            break;
        }
        const size_t close = pattern.find('}', open);
        out += pattern.substr(at, open - at) + placeholder_text(pattern.substr(open + 1, close - open - 1), scope, pattern);
        at = close + 1;
    }
    return out;
}

}  // namespace

TensorSet parse_tensor_set(const nlohmann::json& j, const std::string& file) {
    const std::string where = file + ": tensor_set";
    only_keys(j, kSetKeys, where);
    TensorSet set;
    set.file = file;
    if (auto e = j.find("extends"); e != j.end()) {
        if (!e->is_string() || e->get<std::string>().empty()) throw Error(where + ".extends: expected an architecture name");
        set.extends = e->get<std::string>();
    }
    set.definitions = expressions_by_name(j, "define", where);
    set.ranges = expressions_by_name(j, "ranges", where);
    set.checks = parse_checks(j, where);
    auto tensors = j.find("tensors");
    if (tensors != j.end() && !tensors->is_array()) throw Error(where + ".tensors: expected a list");
    if (tensors != j.end())
        for (size_t k = 0; k < tensors->size(); ++k)
            set.tensors.push_back(parse_entry((*tensors)[k], k, where + ".tensors[" + std::to_string(k) + "]"));
    if (set.extends.empty() && tensors == j.end()) throw Error(where + ": neither 'extends' nor 'tensors'");
    std::set<std::string> names;
    for (const auto& t : set.tensors)
        if (!names.insert(t.name).second) throw Error(where + ": two entries named '" + t.name + "'");
    return set;
}

TensorSet extend_tensor_set(const TensorSet& parent, const TensorSet& child) {
    TensorSet out = parent;
    out.file = child.file;
    out.extends = child.extends;
    for (const auto& [name, e] : child.definitions) out.definitions.insert_or_assign(name, e);
    for (const auto& [name, e] : child.ranges) out.ranges.insert_or_assign(name, e);
    out.checks.insert(out.checks.end(), child.checks.begin(), child.checks.end());
    for (const TensorTemplate& t : child.tensors) {
        bool replaced = false;
        for (TensorTemplate& inherited : out.tensors)
            if (inherited.name == t.name) {
                inherited = t;
                replaced = true;
            }
        if (!replaced) out.tensors.push_back(t);
    }
    return out;
}

ExpectedTensors expand_tensor_set(const TensorSet& set, const HfConfig& config, const TensorSetInputs& inputs) {
    ExpressionScope scope;
    scope.config = &config.json;
    scope.config_path = config.dir + "/config.json";
    scope.definitions = &set.definitions;
    scope.bound = {{"value_model", bool_value(inputs.value_model)},
                   {"mtp_layers", int_value(inputs.mtp_layers)},
                   {"mtp_shared_copies", bool_value(inputs.mtp_shared_copies)},
                   {"tie_word_embeddings", bool_value(config.tie_word_embeddings)}};
    for (const TensorSetCheck& check : set.checks)
        if (!evaluate_bool(check.require, scope)) throw Error(scope.config_path + ": " + check.message + " (" + set.file + ")");
    std::map<std::string, int64_t> counts;
    for (const auto& [name, e] : set.ranges) {
        counts[name] = evaluate_int(e, scope);
        if (counts[name] < 0) throw Error(scope.config_path + ": " + e.text() + " is negative (" + set.file + " range " + name + ")");
    }
    ExpectedTensors out;
    int64_t total = 0;
    for (const TensorTemplate& t : set.tensors) {
        std::vector<std::string> ranged;  // the placeholders that iterate; the others are definitions
        std::vector<int64_t> n;
        int64_t product = 1;
        for (const auto& p : t.placeholders) {
            auto it = counts.find(p);
            if (it == counts.end()) {
                if (!set.definitions.count(p))
                    throw Error(set.file + ": tensor '" + t.name + "': {" + p + "} is neither a range nor a definition");
                continue;
            }
            if (std::find(ranged.begin(), ranged.end(), p) != ranged.end()) continue;
            ranged.push_back(p);
            n.push_back(it->second);
            product = it->second == 0 ? 0 : std::min(product * std::min(it->second, kMaxExpectedTensors + 1), kMaxExpectedTensors + 1);
        }
        total += product;
        if (total > kMaxExpectedTensors)
            throw Error(scope.config_path + ": implies more than " + std::to_string(kMaxExpectedTensors) +
                        " tensors (" + set.file + ", at '" + t.name + "')");
        for_each_binding(ranged, n, scope, [&] {
            if (t.when && !evaluate_bool(*t.when, scope)) return;
            Shape shape;
            for (const auto& dim : t.shape) {
                const int64_t d = evaluate_int(dim, scope);
                if (d < 0 || d > kMaxDim)
                    throw Error(scope.config_path + ": " + dim.text() + " = " + std::to_string(d) + " for '" + t.name +
                                "': expected 0.." + std::to_string(kMaxDim) + " (" + set.file + ")");
                shape.push_back(d);
            }
            const std::string name = filled(t.name, scope);
            auto& into = t.optional ? out.optional : out.required;
            if (out.required.count(name) || out.optional.count(name))
                throw Error(set.file + ": two tensor_set entries give '" + name + "'");
            into.emplace(name, std::move(shape));
        });
        for (const auto& p : ranged) scope.bound.erase(p);  // a later entry must not see a stale value
    }
    return out;
}

}  // namespace vmerge
