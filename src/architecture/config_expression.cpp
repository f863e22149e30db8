#include "architecture/config_expression.h"

#include <cctype>
#include <set>

#include "architecture/hf_config.h"
#include "core/error.h"
#include "io/json_file.h"

namespace vmerge {

struct ConfigExpression::Node {
    enum class Op { Int, Bool, String, Name, Has, Len, Not, Neg, Add, Sub, Mul, Div, Mod,
                    Eq, Ne, Lt, Le, Gt, Ge, In, And, Or, Coalesce, Cond, Index };
    Op op = Op::Int;
    int64_t number = 0;
    std::string text;  // Name: the dotted name; String: the literal
    std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

// Products of two int64 values are checked for overflow in twice the width (GCC and Clang's
// 128-bit integer; __extension__ keeps -Wpedantic quiet about it).
__extension__ typedef __int128 Int128;

using Node = ConfigExpression::Node;
using Op = Node::Op;
using NodePtr = std::shared_ptr<const Node>;

// Integers in expressions stay well inside int64 (sizes, counts): beyond this is an Error.
constexpr int64_t kMaxMagnitude = int64_t{1} << 50;

NodePtr make(Op op, std::vector<NodePtr> kids = {}, std::string text = "", int64_t number = 0) {
    auto n = std::make_shared<Node>();
    n->op = op;
    n->kids = std::move(kids);
    n->text = std::move(text);
    n->number = number;
    return n;
}

// Recursive descent, lowest precedence first: c ? a : b, ??, ||, &&, comparisons and `in`,
// + -, * / %, unary ! -, postfix [ ], primaries.
class Parser {
public:
    Parser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

    NodePtr parse() {
        NodePtr e = conditional();
        skip_space();
        if (at_ < s_.size()) fail("unexpected '" + s_.substr(at_, 1) + "'");
        return e;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw Error(where_ + ": '" + s_ + "': " + what + " at column " + std::to_string(at_ + 1));
    }
    void skip_space() {
        while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
    }
    bool eat(const std::string& token) {
        skip_space();
        if (s_.compare(at_, token.size(), token) != 0) return false;
        // "in" is a word: not the start of a name such as "intermediate_size".
        if (std::isalpha(static_cast<unsigned char>(token[0])) && at_ + token.size() < s_.size() &&
            (std::isalnum(static_cast<unsigned char>(s_[at_ + token.size()])) || s_[at_ + token.size()] == '_'))
            return false;
        at_ += token.size();
        return true;
    }
    void expect(const std::string& token) {
        if (!eat(token)) fail("expected '" + token + "'");
    }

    NodePtr conditional() {
        NodePtr c = coalesce();
        if (!eat("?")) return c;
        NodePtr a = conditional();
        expect(":");
        return make(Op::Cond, {c, a, conditional()});
    }
    NodePtr coalesce() {
        NodePtr e = logical_or();
        while (eat("??")) e = make(Op::Coalesce, {e, logical_or()});
        return e;
    }
    NodePtr logical_or() {
        NodePtr e = logical_and();
        while (eat("||")) e = make(Op::Or, {e, logical_and()});
        return e;
    }
    NodePtr logical_and() {
        NodePtr e = comparison();
        while (eat("&&")) e = make(Op::And, {e, comparison()});
        return e;
    }
    NodePtr comparison() {
        NodePtr e = sum();
        static const std::pair<const char*, Op> ops[] = {{"==", Op::Eq}, {"!=", Op::Ne}, {"<=", Op::Le}, {">=", Op::Ge},
                                                         {"<", Op::Lt},   {">", Op::Gt},  {"in", Op::In}};
        for (const auto& [token, op] : ops)
            if (eat(token)) return make(op, {e, sum()});
        return e;
    }
    NodePtr sum() {
        NodePtr e = product();
        for (;;) {
            if (eat("+")) e = make(Op::Add, {e, product()});
            else if (eat("-")) e = make(Op::Sub, {e, product()});
            else return e;
        }
    }
    NodePtr product() {
        NodePtr e = unary();
        for (;;) {
            if (eat("*")) e = make(Op::Mul, {e, unary()});
            else if (eat("/")) e = make(Op::Div, {e, unary()});
            else if (eat("%")) e = make(Op::Mod, {e, unary()});
            else return e;
        }
    }
    NodePtr unary() {
        skip_space();
        if (s_.compare(at_, 2, "!=") != 0 && eat("!")) return make(Op::Not, {unary()});
        if (eat("-")) return make(Op::Neg, {unary()});
        NodePtr e = primary();
        while (eat("[")) {
            NodePtr index = conditional();
            expect("]");
            e = make(Op::Index, {e, index});
        }
        return e;
    }
    std::string name() {
        skip_space();
        const size_t start = at_;
        while (at_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_' ||
                                   (s_[at_] == '.' && at_ > start)))
            ++at_;
        if (at_ == start || std::isdigit(static_cast<unsigned char>(s_[start]))) fail("expected a name");
        if (s_[at_ - 1] == '.') fail("a name may not end with '.'");
        return s_.substr(start, at_ - start);
    }
    NodePtr primary() {
        skip_space();
        if (at_ >= s_.size()) fail("expected a value");
        const char c = s_[at_];
        if (eat("(")) {
            NodePtr e = conditional();
            expect(")");
            return e;
        }
        if (std::isdigit(static_cast<unsigned char>(c))) {
            int64_t v = 0;
            while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) {
                v = v * 10 + (s_[at_++] - '0');
                if (v > kMaxMagnitude) fail("number too large");
            }
            return make(Op::Int, {}, "", v);
        }
        if (c == '\'') {
            const size_t end = s_.find('\'', at_ + 1);
            if (end == std::string::npos) fail("unterminated string");
            std::string literal = s_.substr(at_ + 1, end - at_ - 1);
            at_ = end + 1;
            return make(Op::String, {}, literal);
        }
        const std::string n = name();
        if (n == "true" || n == "false") return make(Op::Bool, {}, "", n == "true");
        if (n == "has" || n == "len") {
            expect("(");
            NodePtr arg = n == "has" ? make(Op::Name, {}, name()) : conditional();
            expect(")");
            return make(n == "has" ? Op::Has : Op::Len, {arg});
        }
        return make(Op::Name, {}, n);
    }

    const std::string& s_;
    const std::string& where_;
    size_t at_ = 0;
};

// Evaluation of one expression in one scope; `active` holds the definitions being evaluated,
// so that a definition naming itself reads config.json.
class Evaluator {
public:
    Evaluator(const ConfigExpression& e, const ExpressionScope& scope) : e_(e), scope_(scope) {}

    ConfigValue value(const Node& n) {
        switch (n.op) {
            case Op::Int: return int_value(n.number);
            case Op::Bool: return bool_value(n.number != 0);
            case Op::String: return string_value(n.text);
            case Op::Name: return lookup(n.text);
            case Op::Has: return bool_value(config_value(n.kids[0]->text).kind != ConfigValue::Kind::Absent);
            case Op::Len: return int_value(static_cast<int64_t>(list(*n.kids[0]).size()));
            case Op::Not: return bool_value(!boolean(*n.kids[0]));
            case Op::Neg: return int_value(checked(-static_cast<Int128>(integer(*n.kids[0]))));
            case Op::And: return bool_value(boolean(*n.kids[0]) && boolean(*n.kids[1]));
            case Op::Or: return bool_value(boolean(*n.kids[0]) || boolean(*n.kids[1]));
            case Op::Coalesce: {
                ConfigValue a = value(*n.kids[0]);
                return a.kind == ConfigValue::Kind::Absent ? value(*n.kids[1]) : a;
            }
            case Op::Cond: return boolean(*n.kids[0]) ? value(*n.kids[1]) : value(*n.kids[2]);
            case Op::Index: return element(n);
            case Op::In: return bool_value(contains(n));
            case Op::Eq: case Op::Ne: return bool_value(equal(n) == (n.op == Op::Eq));
            default: return arithmetic(n);
        }
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(scope_.config_path + ": " + e_.text() + ": " + what);
    }

    int64_t integer(const Node& n) { return want(value(n), ConfigValue::Kind::Int, "an integer").integer; }
    bool boolean(const Node& n) { return want(value(n), ConfigValue::Kind::Bool, "true or false").boolean; }

private:
    static ConfigValue string_value(std::string s) {
        ConfigValue v;
        v.kind = ConfigValue::Kind::String;
        v.string = std::move(s);
        return v;
    }
    const ConfigValue& want(const ConfigValue& v, ConfigValue::Kind kind, const char* what) const {
        if (v.kind == ConfigValue::Kind::Absent) fail("config.json has no '" + v.string + "'");
        if (v.kind != kind) fail(std::string("expected ") + what);
        return v;
    }
    int64_t checked(Int128 v) const {
        if (v > kMaxMagnitude || v < -kMaxMagnitude) fail("a value beyond 2^50");
        return static_cast<int64_t>(v);
    }
    const nlohmann::json& list(const Node& n) {
        return *want(value(n), ConfigValue::Kind::List, "a list").list;
    }

    ConfigValue from_json(const nlohmann::json& j, const std::string& name) const {
        ConfigValue v;
        if (j.is_boolean()) return bool_value(j.get<bool>());
        // A key with known bounds (hf_config.cpp) is held to them whichever object holds it.
        if (j.is_number())
            if (const auto bounds = known_config_int_bounds(name.substr(name.rfind('.') + 1)))
                return int_value(json_int_within(j, bounds->first, bounds->second, scope_.config_path + ": " + name));
        if (j.is_number_integer()) {
            const Int128 raw = j.is_number_unsigned() ? Int128(j.get<uint64_t>()) : Int128(j.get<int64_t>());
            if (raw > kMaxMagnitude || raw < -kMaxMagnitude) fail("config.json's " + name + " " + j.dump() + " is beyond 2^50");
            return int_value(static_cast<int64_t>(raw));
        }
        if (j.is_number_float()) {
            const double d = j.get<double>();
            if (d != static_cast<double>(static_cast<int64_t>(d)) || d > double(kMaxMagnitude) || d < -double(kMaxMagnitude))
                fail("config.json's " + name + " " + j.dump() + ": expected a whole number");
            return int_value(static_cast<int64_t>(d));
        }
        if (j.is_string()) return string_value(j.get<std::string>());
        if (j.is_array()) {
            v.kind = ConfigValue::Kind::List;
            v.list = &j;
            return v;
        }
        if (j.is_null()) return absent(name);
        fail("config.json's " + name + " is an object, not a value");
    }
    static ConfigValue absent(const std::string& name) {
        ConfigValue v;
        v.string = name;
        return v;
    }

    ConfigValue lookup(const std::string& name) {
        if (auto it = scope_.bound.find(name); it != scope_.bound.end()) return it->second;
        if (scope_.definitions && !active_.count(name))
            if (auto it = scope_.definitions->find(name); it != scope_.definitions->end()) {
                active_.insert(name);
                ConfigValue v = value(it->second.root());
                active_.erase(name);
                return v;
            }
        return config_value(name);
    }

    // config.json's key `name` (dotted into objects), whatever the definitions say.
    ConfigValue config_value(const std::string& name) const {
        const nlohmann::json* j = scope_.config;
        for (size_t start = 0; j;) {
            const size_t dot = name.find('.', start);
            const std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            auto it = j->is_object() ? j->find(part) : j->end();
            j = j->is_object() && it != j->end() ? &*it : nullptr;
            if (dot == std::string::npos) break;
            start = dot + 1;
        }
        return j ? from_json(*j, name) : absent(name);
    }

    ConfigValue element(const Node& n) {
        const nlohmann::json& l = list(*n.kids[0]);
        const int64_t i = integer(*n.kids[1]);
        if (i < 0 || i >= static_cast<int64_t>(l.size()))
            fail("index " + std::to_string(i) + " outside a list of " + std::to_string(l.size()));
        return from_json(l[static_cast<size_t>(i)], n.kids[0]->text + "[" + std::to_string(i) + "]");
    }
    bool same(const ConfigValue& a, const ConfigValue& b) const {
        if (a.kind == ConfigValue::Kind::Absent) want(a, ConfigValue::Kind::Int, "");
        if (b.kind == ConfigValue::Kind::Absent) want(b, ConfigValue::Kind::Int, "");
        if (a.kind != b.kind) return false;
        switch (a.kind) {
            case ConfigValue::Kind::Bool: return a.boolean == b.boolean;
            case ConfigValue::Kind::Int: return a.integer == b.integer;
            case ConfigValue::Kind::String: return a.string == b.string;
            default: fail("lists are not compared");
        }
    }
    bool equal(const Node& n) { return same(value(*n.kids[0]), value(*n.kids[1])); }
    bool contains(const Node& n) {
        const ConfigValue needle = value(*n.kids[0]);
        for (const auto& item : list(*n.kids[1]))
            if (!item.is_array() && !item.is_object() && !item.is_null() && same(needle, from_json(item, "")))
                return true;
        return false;
    }

    ConfigValue arithmetic(const Node& n) {
        const Int128 a = integer(*n.kids[0]), b = integer(*n.kids[1]);
        switch (n.op) {
            case Op::Add: return int_value(checked(a + b));
            case Op::Sub: return int_value(checked(a - b));
            case Op::Mul: return int_value(checked(a * b));
            case Op::Div:
            case Op::Mod:
                if (b == 0) fail("division by zero");
                return int_value(checked(n.op == Op::Div ? a / b : a % b));
            case Op::Lt: return bool_value(a < b);
            case Op::Le: return bool_value(a <= b);
            case Op::Gt: return bool_value(a > b);
            case Op::Ge: return bool_value(a >= b);
            default: fail("unknown operator");
        }
    }

    const ConfigExpression& e_;
    const ExpressionScope& scope_;
    std::set<std::string> active_;
};

}  // namespace

ConfigExpression ConfigExpression::parse(const std::string& text, const std::string& where) {
    ConfigExpression e;
    e.text_ = text;
    e.root_ = Parser(e.text_, where).parse();
    return e;
}

ConfigValue int_value(int64_t v) {
    ConfigValue out;
    out.kind = ConfigValue::Kind::Int;
    out.integer = v;
    return out;
}

ConfigValue bool_value(bool v) {
    ConfigValue out;
    out.kind = ConfigValue::Kind::Bool;
    out.boolean = v;
    return out;
}

ConfigValue evaluate(const ConfigExpression& e, const ExpressionScope& scope) {
    return Evaluator(e, scope).value(e.root());
}

int64_t evaluate_int(const ConfigExpression& e, const ExpressionScope& scope) {
    return Evaluator(e, scope).integer(e.root());
}

bool evaluate_bool(const ConfigExpression& e, const ExpressionScope& scope) {
    return Evaluator(e, scope).boolean(e.root());
}

}  // namespace vmerge
