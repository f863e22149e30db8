#include "pickle/pickle.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <unordered_map>

#include "core/error.h"

namespace vmerge::pickle {

namespace {

// Opcodes of pickle protocols 0-5 (CPython Lib/pickle.py).
enum Opcode : uint8_t {
    kMark = '(',
    kStop = '.',
    kPop = '0',
    kPopMark = '1',
    kDup = '2',
    kFloat = 'F',
    kInt = 'I',
    kBinInt = 'J',
    kBinInt1 = 'K',
    kLong = 'L',
    kBinInt2 = 'M',
    kNone = 'N',
    kPersId = 'P',
    kBinPersId = 'Q',
    kReduce = 'R',
    kString = 'S',
    kBinString = 'T',
    kShortBinString = 'U',
    kUnicode = 'V',
    kBinUnicode = 'X',
    kAppend = 'a',
    kBuild = 'b',
    kGlobal = 'c',
    kDict = 'd',
    kEmptyDict = '}',
    kAppends = 'e',
    kGet = 'g',
    kBinGet = 'h',
    kInst = 'i',
    kLongBinGet = 'j',
    kList = 'l',
    kEmptyList = ']',
    kObj = 'o',
    kPut = 'p',
    kBinPut = 'q',
    kLongBinPut = 'r',
    kSetItem = 's',
    kTuple = 't',
    kEmptyTuple = ')',
    kSetItems = 'u',
    kBinFloat = 'G',
    kProto = 0x80,
    kNewObj = 0x81,
    kExt1 = 0x82,
    kExt2 = 0x83,
    kExt4 = 0x84,
    kTuple1 = 0x85,
    kTuple2 = 0x86,
    kTuple3 = 0x87,
    kNewTrue = 0x88,
    kNewFalse = 0x89,
    kLong1 = 0x8a,
    kLong4 = 0x8b,
    kBinBytes = 'B',
    kShortBinBytes = 'C',
    kShortBinUnicode = 0x8c,
    kBinUnicode8 = 0x8d,
    kBinBytes8 = 0x8e,
    kEmptySet = 0x8f,
    kAddItems = 0x90,
    kFrozenSet = 0x91,
    kNewObjEx = 0x92,
    kStackGlobal = 0x93,
    kMemoize = 0x94,
    kFrame = 0x95,
    kByteArray8 = 0x96,
    kNextBuffer = 0x97,
    kReadOnlyBuffer = 0x98,
};

constexpr uint8_t kHighestProtocol = 5;
// CPython refuses int() of longer decimal strings by default (sys.int_info.default_max_str_digits);
// the limit also keeps the quadratic decimal conversion cheap.
constexpr size_t kMaxDecimalDigits = 4300;

class Interpreter {
public:
    Interpreter(std::string_view bytes, const std::string& where, const Limits& limits)
        : bytes_(bytes), where_(where), limits_(limits) {}

    ValuePtr run();

private:
    // Each runs the current opcode when it belongs to its group; false when it does not.
    bool scalar_opcode();
    bool container_opcode();
    bool object_opcode();
    bool memo_opcode();

    [[noreturn]] void fail(const std::string& what) const {
        char opcode[8];
        std::snprintf(opcode, sizeof opcode, "0x%02x", opcode_);
        throw Error(where_ + ": pickle opcode " + opcode + " at byte " +
                    std::to_string(opcode_pos_) + ": " + what);
    }

    // --- reading the stream ---
    std::string_view take(uint64_t length, const char* what) {
        const uint64_t left = bytes_.size() - pos_;
        if (length > left) {
            fail(std::string(what) + " of " + std::to_string(length) +
                 " bytes runs past the end of the pickle (" + std::to_string(left) +
                 " bytes left)");
        }
        const std::string_view taken = bytes_.substr(pos_, length);
        pos_ += length;
        return taken;
    }
    uint64_t read_le(size_t width, const char* what) {
        const std::string_view raw = take(width, what);
        uint64_t value = 0;
        for (size_t i = width; i-- > 0;) value = (value << 8) | static_cast<uint8_t>(raw[i]);
        return value;
    }
    std::string_view read_line(const char* what) {
        const size_t end = bytes_.find('\n', pos_);
        if (end == std::string_view::npos) fail(std::string(what) + " has no terminating newline");
        const std::string_view line = bytes_.substr(pos_, end - pos_);
        pos_ = end + 1;
        return line;
    }
    // A u32/u64 length prefix followed by that many bytes.
    std::string_view read_counted(size_t width, const char* what) {
        const uint64_t length = read_le(width, "length prefix");
        return take(length, what);
    }
    // BINSTRING and LONG4 lengths are signed 32-bit in CPython.
    std::string_view read_signed_counted(const char* what) {
        const uint64_t length = read_le(4, "length prefix");
        if (length > 0x7FFFFFFF) fail(std::string("negative length for ") + what);
        return take(length, what);
    }
    uint64_t read_decimal_index(const char* what) {
        const std::string_view line = read_line(what);
        uint64_t index = 0;
        const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), index);
        if (error != std::errc() || end != line.data() + line.size()) {
            fail(std::string(what) + " '" + std::string(line) + "' is not a memo index");
        }
        return index;
    }

    // --- values ---
    ValuePtr make(Kind kind) {
        if (++values_made_ > limits_.max_values) {
            fail("more than " + std::to_string(limits_.max_values) + " values");
        }
        auto value = std::make_shared<Value>();
        value->kind = kind;
        return value;
    }
    ValuePtr make_text(Kind kind, std::string_view text) {
        if (kind == Kind::String) check_utf8(text);
        ValuePtr value = make(kind);
        value->text = text;
        return value;
    }
    // Text must be UTF-8 (what Python's unpickler decodes it as) without surrogates, so that
    // keys and names can go into JSON (the scan all-gather) and messages as they are.
    void check_utf8(std::string_view text) {
        const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
        for (size_t i = 0; i < text.size();) {
            const uint8_t lead = byte(i);
            size_t length = 0;
            uint32_t code_point = 0;
            if (lead < 0x80) {
                ++i;
                continue;
            } else if (lead >= 0xC2 && lead <= 0xDF) {
                length = 2, code_point = lead & 0x1F;
            } else if (lead >= 0xE0 && lead <= 0xEF) {
                length = 3, code_point = lead & 0x0F;
            } else if (lead >= 0xF0 && lead <= 0xF4) {
                length = 4, code_point = lead & 0x07;
            }
            bool valid = length != 0 && i + length <= text.size();
            for (size_t k = 1; valid && k < length; ++k) {
                valid = (byte(i + k) & 0xC0) == 0x80;
                code_point = (code_point << 6) | (byte(i + k) & 0x3F);
            }
            if (valid) {
                const uint32_t smallest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
                valid = code_point >= smallest && code_point <= 0x10FFFF &&
                        (code_point < 0xD800 || code_point > 0xDFFF);
            }
            if (!valid) {
                char hex[8];
                std::snprintf(hex, sizeof hex, "0x%02x", lead);
                fail("text is not valid UTF-8 (byte " + std::to_string(i) + " of the text is " +
                     hex + ")");
            }
            i += length;
        }
    }
    ValuePtr make_int(int64_t integer) {
        ValuePtr value = make(Kind::Int);
        value->integer = integer;
        return value;
    }
    ValuePtr make_bool(bool boolean) {
        ValuePtr value = make(Kind::Bool);
        value->boolean = boolean;
        return value;
    }
    ValuePtr make_float(double real) {
        ValuePtr value = make(Kind::Float);
        value->real = real;
        return value;
    }
    ValuePtr make_global(std::string_view module, std::string_view name) {
        ValuePtr value = make(Kind::Global);
        value->module = module;
        value->name = name;
        return value;
    }
    ValuePtr make_integer_from_le(std::string_view twos_complement);
    ValuePtr make_integer_from_decimal(std::string_view text);
    ValuePtr make_sequence(Kind kind, std::vector<ValuePtr> items);
    ValuePtr make_dict(std::vector<ValuePtr> flat_pairs);
    ValuePtr make_object(const ValuePtr& callable, const ValuePtr& args, bool from_newobj);
    ValuePtr make_persistent_id(const ValuePtr& id);
    ValuePtr reduce(const ValuePtr& callable, const ValuePtr& args);
    std::string latin1_from_utf8(std::string_view utf8);
    std::string decode_string_literal(std::string_view line);
    std::string decode_raw_unicode_escape(std::string_view line);

    // --- the tree: depth and immutability of placed values ---
    // Every child goes through here, so a value's depth is final once it is placed and
    // nothing deeper than max_depth is ever built.
    void attach(Value& parent, const ValuePtr& child) {
        if (child.get() == &parent) fail("a value cannot contain itself");
        if (child->depth >= limits_.max_depth) {
            fail("values nested deeper than " + std::to_string(limits_.max_depth) + " levels");
        }
        parent.depth = std::max(parent.depth, child->depth + 1);
        child->placed = true;
    }
    // A value already inside another cannot change: its parents' depths would go stale and
    // a cycle could form (which would also leak the shared_ptr tree).
    void check_changeable(const ValuePtr& target, const char* change) {
        if (target->placed) {
            fail(std::string(change) + " on a " + describe(*target) +
                 " that is already inside another value (cyclic or shared structure)");
        }
    }
    void append_items(const ValuePtr& target, std::vector<ValuePtr> items, const char* change);
    void set_items(const ValuePtr& target, std::vector<ValuePtr> flat_pairs, const char* change);

    // --- the stack ---
    size_t frame_start() const { return marks_.empty() ? 0 : marks_.back(); }
    void check_stack_room() {
        if (stack_.size() + marks_.size() >= limits_.max_stack) {
            fail("stack deeper than " + std::to_string(limits_.max_stack) + " entries");
        }
    }
    void push(ValuePtr value) {
        check_stack_room();
        stack_.push_back(std::move(value));
    }
    const ValuePtr& top(const char* expected) {
        if (stack_.size() <= frame_start())
            fail(std::string("stack underflow: expected ") + expected);
        return stack_.back();
    }
    ValuePtr pop(const char* expected) {
        ValuePtr value = top(expected);
        stack_.pop_back();
        return value;
    }
    std::vector<ValuePtr> pop_to_mark() {
        if (marks_.empty()) fail("no MARK on the stack");
        const auto first = stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back());
        std::vector<ValuePtr> items(std::make_move_iterator(first),
                                    std::make_move_iterator(stack_.end()));
        stack_.erase(first, stack_.end());
        marks_.pop_back();
        return items;
    }
    void memo_put(uint64_t index) {
        const ValuePtr& value = top("a value to memoize");
        if (!memo_.contains(index) && memo_.size() >= limits_.max_memo) {
            fail("more than " + std::to_string(limits_.max_memo) + " memo entries");
        }
        memo_[index] = value;
    }
    void memo_get(uint64_t index) {
        const auto it = memo_.find(index);
        if (it == memo_.end()) fail("memo index " + std::to_string(index) + " was never stored");
        push(it->second);
    }

    std::string_view bytes_;
    const std::string& where_;
    const Limits& limits_;
    size_t pos_ = 0;
    size_t opcode_pos_ = 0;
    uint8_t opcode_ = 0;
    std::vector<ValuePtr> stack_;
    std::vector<size_t> marks_;  // stack sizes at each MARK
    std::unordered_map<uint64_t, ValuePtr> memo_;
    uint64_t values_made_ = 0;
};

ValuePtr Interpreter::make_integer_from_le(std::string_view twos_complement) {
    const auto byte = [&](size_t i) { return static_cast<uint8_t>(twos_complement[i]); };
    size_t size = twos_complement.size();
    // Drop sign-extension bytes so that BigInt means "does not fit in int64".
    while (size > 1 && ((byte(size - 1) == 0x00 && !(byte(size - 2) & 0x80)) ||
                        (byte(size - 1) == 0xFF && (byte(size - 2) & 0x80)))) {
        --size;
    }
    if (size > 8) return make_text(Kind::BigInt, twos_complement.substr(0, size));
    uint64_t bits = 0;
    for (size_t i = size; i-- > 0;) bits = (bits << 8) | byte(i);
    if (size > 0 && size < 8 && (byte(size - 1) & 0x80)) bits |= ~uint64_t{0} << (8 * size);
    return make_int(static_cast<int64_t>(bits));
}

ValuePtr Interpreter::make_integer_from_decimal(std::string_view text) {
    const bool negative = !text.empty() && text.front() == '-';
    std::string_view digits = text;
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+'))
        digits.remove_prefix(1);
    if (digits.empty() ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        fail("'" + std::string(text.substr(0, 40)) + "' is not a decimal integer");
    }
    if (digits.size() > kMaxDecimalDigits) {
        fail("decimal integer of " + std::to_string(digits.size()) + " digits is too long");
    }
    std::string magnitude;  // little-endian base 256
    for (const char digit : digits) {
        unsigned carry = static_cast<unsigned>(digit - '0');
        for (char& b : magnitude) {
            const unsigned v = static_cast<uint8_t>(b) * 10u + carry;
            b = static_cast<char>(v & 0xFF);
            carry = v >> 8;
        }
        if (carry != 0) magnitude.push_back(static_cast<char>(carry));
    }
    magnitude.push_back('\0');  // room for the sign bit
    if (negative) {
        unsigned carry = 1;
        for (char& b : magnitude) {
            const unsigned v = static_cast<uint8_t>(~static_cast<uint8_t>(b)) + carry;
            b = static_cast<char>(v & 0xFF);
            carry = v >> 8;
        }
    }
    return make_integer_from_le(magnitude);
}

ValuePtr Interpreter::make_sequence(Kind kind, std::vector<ValuePtr> items) {
    ValuePtr sequence = make(kind);
    for (const ValuePtr& item : items) attach(*sequence, item);
    sequence->items = std::move(items);
    return sequence;
}

ValuePtr Interpreter::make_dict(std::vector<ValuePtr> flat_pairs) {
    ValuePtr dict = make(Kind::Dict);
    set_items(dict, std::move(flat_pairs), "DICT");
    return dict;
}

ValuePtr Interpreter::make_object(const ValuePtr& callable, const ValuePtr& args,
                                  bool from_newobj) {
    if (args->kind != Kind::Tuple) fail("arguments must be a tuple, got " + describe(*args));
    ValuePtr object = make(Kind::Object);
    attach(*object, callable);
    attach(*object, args);
    object->callable = callable;
    object->args = args;
    object->from_newobj = from_newobj;
    return object;
}

ValuePtr Interpreter::make_persistent_id(const ValuePtr& id) {
    ValuePtr persistent_id = make(Kind::PersistentId);
    attach(*persistent_id, id);
    persistent_id->args = id;
    return persistent_id;
}

ValuePtr Interpreter::reduce(const ValuePtr& callable, const ValuePtr& args) {
    if (args->kind != Kind::Tuple) fail("REDUCE arguments must be a tuple, got " + describe(*args));
    const std::vector<ValuePtr>& items = args->items;
    // OrderedDict() is how every state_dict starts; SETITEMS then fills it like a dict.
    if (is_global(*callable, "collections", "OrderedDict") && items.empty()) {
        return make(Kind::Dict);
    }
    // Protocol 2 pickles Python bytes as _codecs.encode(text, 'latin1').
    if (is_global(*callable, "_codecs", "encode") && items.size() == 2 &&
        items[0]->kind == Kind::String && items[1]->kind == Kind::String &&
        items[1]->text == "latin1") {
        return make_text(Kind::Bytes, latin1_from_utf8(items[0]->text));
    }
    return make_object(callable, args, false);
}

std::string Interpreter::latin1_from_utf8(std::string_view utf8) {
    std::string latin1;
    latin1.reserve(utf8.size());
    for (size_t i = 0; i < utf8.size(); ++i) {
        const auto lead = static_cast<uint8_t>(utf8[i]);
        if (lead < 0x80) {
            latin1.push_back(static_cast<char>(lead));
            continue;
        }
        // Only U+0080..U+00FF are latin-1: two-byte sequences led by 0xC2 or 0xC3.
        const bool two_byte_latin1 = (lead == 0xC2 || lead == 0xC3) && i + 1 < utf8.size() &&
                                     (static_cast<uint8_t>(utf8[i + 1]) & 0xC0) == 0x80;
        if (!two_byte_latin1) {
            fail("_codecs.encode text has a character outside latin-1 at byte " +
                 std::to_string(i));
        }
        latin1.push_back(
            static_cast<char>(((lead & 0x03) << 6) | (static_cast<uint8_t>(utf8[++i]) & 0x3F)));
    }
    return latin1;
}

void append_utf8(std::string& out, uint32_t code_point) {
    if (code_point < 0x80) {
        out.push_back(static_cast<char>(code_point));
    } else if (code_point < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
        out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    } else if (code_point < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
        out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
        out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    }
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Protocol 0 STRING: a quoted Python bytes repr. Covers the escapes repr() produces.
std::string Interpreter::decode_string_literal(std::string_view line) {
    if (line.size() < 2 || line.front() != line.back() ||
        (line.front() != '\'' && line.front() != '"')) {
        fail("STRING argument is not a quoted string");
    }
    const std::string_view body = line.substr(1, line.size() - 2);
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) {
            out.push_back(body[i]);
            continue;
        }
        const char escaped = body[++i];
        switch (escaped) {
            case 'n': out.push_back('\n'); break;
            case 'r': out.push_back('\r'); break;
            case 't': out.push_back('\t'); break;
            case '\\':
            case '\'':
            case '"': out.push_back(escaped); break;
            case 'x': {
                const bool has_two_digits = i + 2 < body.size();
                const int high = has_two_digits ? hex_digit(body[i + 1]) : -1;
                const int low = has_two_digits ? hex_digit(body[i + 2]) : -1;
                if (high < 0 || low < 0) fail("STRING has a bad \\x escape");
                out.push_back(static_cast<char>(high * 16 + low));
                i += 2;
                break;
            }
            default:  // CPython keeps unknown escapes as they are
                out.push_back('\\');
                out.push_back(escaped);
        }
    }
    return out;
}

// Protocol 0 UNICODE: latin-1 bytes with \uXXXX and \UXXXXXXXX escapes.
std::string Interpreter::decode_raw_unicode_escape(std::string_view line) {
    std::string out;
    for (size_t i = 0; i < line.size(); ++i) {
        size_t digits = 0;  // hex digits of a \u or \U escape starting here
        if (line[i] == '\\' && i + 1 < line.size()) {
            if (line[i + 1] == 'u') digits = 4;
            if (line[i + 1] == 'U') digits = 8;
        }
        if (digits == 0) {
            append_utf8(out, static_cast<uint8_t>(line[i]));
            continue;
        }
        if (i + 2 + digits > line.size()) fail("UNICODE has a truncated \\u escape");
        uint32_t code_point = 0;
        for (size_t d = 0; d < digits; ++d) {
            const int digit = hex_digit(line[i + 2 + d]);
            if (digit < 0) fail("UNICODE has a bad \\u escape");
            code_point = code_point * 16 + static_cast<uint32_t>(digit);
        }
        if (code_point > 0x10FFFF) fail("UNICODE escape is beyond U+10FFFF");
        append_utf8(out, code_point);
        i += 1 + digits;
    }
    return out;
}

void Interpreter::append_items(const ValuePtr& target, std::vector<ValuePtr> items,
                               const char* change) {
    if (target->kind != Kind::List && target->kind != Kind::Object) {
        fail(std::string(change) + " needs a list below its items, got " + describe(*target));
    }
    check_changeable(target, change);
    for (const ValuePtr& item : items) attach(*target, item);
    target->items.insert(target->items.end(), std::make_move_iterator(items.begin()),
                         std::make_move_iterator(items.end()));
}

void Interpreter::set_items(const ValuePtr& target, std::vector<ValuePtr> flat_pairs,
                            const char* change) {
    if (target->kind != Kind::Dict && target->kind != Kind::Object) {
        fail(std::string(change) + " needs a dict below its items, got " + describe(*target));
    }
    if (flat_pairs.size() % 2 != 0) fail(std::string(change) + " has a key without a value");
    check_changeable(target, change);
    for (const ValuePtr& item : flat_pairs) attach(*target, item);
    for (size_t i = 0; i < flat_pairs.size(); i += 2) {
        target->entries.emplace_back(std::move(flat_pairs[i]), std::move(flat_pairs[i + 1]));
    }
}

ValuePtr Interpreter::run() {
    while (true) {
        if (pos_ >= bytes_.size()) {
            throw Error(where_ + ": pickle ends at byte " + std::to_string(bytes_.size()) +
                        " without a STOP opcode");
        }
        opcode_pos_ = pos_;
        opcode_ = static_cast<uint8_t>(bytes_[pos_++]);
        switch (opcode_) {
            case kProto: {
                const uint64_t protocol = read_le(1, "protocol number");
                if (protocol > kHighestProtocol) {
                    fail("unsupported pickle protocol " + std::to_string(protocol));
                }
                break;
            }
            case kFrame: {
                // Frames only batch reads; their content is ordinary opcodes.
                const uint64_t frame_size = read_le(8, "frame size");
                if (frame_size > bytes_.size() - pos_) {
                    fail("frame of " + std::to_string(frame_size) +
                         " bytes runs past the end of the pickle");
                }
                break;
            }
            case kStop: return pop("the pickled value");

            case kMark:
                check_stack_room();
                marks_.push_back(stack_.size());
                break;
            case kPop:
                // CPython: POP with an empty frame discards the MARK itself.
                if (!marks_.empty() && stack_.size() == marks_.back()) {
                    marks_.pop_back();
                } else {
                    pop("a value to POP");
                }
                break;
            case kPopMark: pop_to_mark(); break;
            case kDup: push(top("a value to DUP")); break;

            default:
                if (!scalar_opcode() && !container_opcode() && !object_opcode() && !memo_opcode()) fail("unknown opcode");
        }
    }
}

// None, booleans, integers, floats, text and bytes: pushed as values.
bool Interpreter::scalar_opcode() {
    switch (opcode_) {
        case kNone: push(make(Kind::None)); break;
        case kNewTrue: push(make_bool(true)); break;
        case kNewFalse: push(make_bool(false)); break;
        case kBinInt1: push(make_int(static_cast<int64_t>(read_le(1, "BININT1")))); break;
        case kBinInt2: push(make_int(static_cast<int64_t>(read_le(2, "BININT2")))); break;
        case kBinInt:
            push(make_int(static_cast<int32_t>(static_cast<uint32_t>(read_le(4, "BININT")))));
            break;
        case kLong1: push(make_integer_from_le(read_counted(1, "LONG1 bytes"))); break;
        case kLong4: push(make_integer_from_le(read_signed_counted("LONG4 bytes"))); break;
        case kInt: {
            const std::string_view line = read_line("INT");
            // Protocol 0 writes booleans as INT 00 / 01.
            if (line == "00" || line == "01") {
                push(make_bool(line == "01"));
            } else {
                push(make_integer_from_decimal(line));
            }
            break;
        }
        case kLong: {
            std::string_view line = read_line("LONG");
            if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
            push(make_integer_from_decimal(line));
            break;
        }
        case kBinFloat: {
            uint64_t bits = 0;  // big-endian, unlike every other binary field
            for (const char byte : take(8, "BINFLOAT"))
                bits = (bits << 8) | static_cast<uint8_t>(byte);
            push(make_float(std::bit_cast<double>(bits)));
            break;
        }
        case kFloat: {
            const std::string_view line = read_line("FLOAT");
            double real = 0.0;
            const auto [end, error] =
                std::from_chars(line.data(), line.data() + line.size(), real);
            if (error != std::errc() || end != line.data() + line.size()) {
                fail("FLOAT '" + std::string(line.substr(0, 40)) + "' is not a number");
            }
            push(make_float(real));
            break;
        }

        case kShortBinUnicode:
            push(make_text(Kind::String, read_counted(1, "SHORT_BINUNICODE text")));
            break;
        case kBinUnicode:
            push(make_text(Kind::String, read_counted(4, "BINUNICODE text")));
            break;
        case kBinUnicode8:
            push(make_text(Kind::String, read_counted(8, "BINUNICODE8 text")));
            break;
        case kUnicode:
            push(make_text(Kind::String, decode_raw_unicode_escape(read_line("UNICODE"))));
            break;
        // Python 2 str; torch.load decodes it as UTF-8 text.
        case kShortBinString:
            push(make_text(Kind::String, read_counted(1, "SHORT_BINSTRING text")));
            break;
        case kBinString:
            push(make_text(Kind::String, read_signed_counted("BINSTRING text")));
            break;
        case kString:
            push(make_text(Kind::String, decode_string_literal(read_line("STRING"))));
            break;
        case kShortBinBytes:
            push(make_text(Kind::Bytes, read_counted(1, "SHORT_BINBYTES data")));
            break;
        case kBinBytes: push(make_text(Kind::Bytes, read_counted(4, "BINBYTES data"))); break;
        case kBinBytes8: push(make_text(Kind::Bytes, read_counted(8, "BINBYTES8 data"))); break;
        case kByteArray8:
            push(make_text(Kind::Bytes, read_counted(8, "BYTEARRAY8 data")));
            break;
        case kNextBuffer:
        case kReadOnlyBuffer: fail("out-of-band buffers (pickle protocol 5) are not supported");
        default: return false;
    }
    return true;
}

// Tuples, lists, sets (as lists) and dicts: built, or filled from the stack.
bool Interpreter::container_opcode() {
    switch (opcode_) {
        case kEmptyTuple: push(make(Kind::Tuple)); break;
        case kTuple1:
        case kTuple2:
        case kTuple3: {
            std::vector<ValuePtr> items(opcode_ - kTuple1 + 1);
            for (size_t i = items.size(); i-- > 0;) items[i] = pop("a tuple item");
            push(make_sequence(Kind::Tuple, std::move(items)));
            break;
        }
        case kTuple: push(make_sequence(Kind::Tuple, pop_to_mark())); break;
        case kEmptyList: push(make(Kind::List)); break;
        case kList: push(make_sequence(Kind::List, pop_to_mark())); break;
        // Sets become lists: nothing torch saves depends on set semantics.
        case kEmptySet: push(make(Kind::List)); break;
        case kFrozenSet: push(make_sequence(Kind::List, pop_to_mark())); break;
        case kEmptyDict: push(make(Kind::Dict)); break;
        case kDict: push(make_dict(pop_to_mark())); break;

        case kAppend: {
            ValuePtr item = pop("an item to APPEND");
            append_items(top("a list to APPEND to"), {std::move(item)}, "APPEND");
            break;
        }
        case kAppends: {
            std::vector<ValuePtr> items = pop_to_mark();
            append_items(top("a list to APPENDS to"), std::move(items), "APPENDS");
            break;
        }
        case kAddItems: {
            std::vector<ValuePtr> items = pop_to_mark();
            append_items(top("a set to ADDITEMS to"), std::move(items), "ADDITEMS");
            break;
        }
        case kSetItem: {
            ValuePtr value = pop("a value for SETITEM");
            ValuePtr key = pop("a key for SETITEM");
            set_items(top("a dict for SETITEM"), {std::move(key), std::move(value)}, "SETITEM");
            break;
        }
        case kSetItems: {
            std::vector<ValuePtr> pairs = pop_to_mark();
            set_items(top("a dict for SETITEMS"), std::move(pairs), "SETITEMS");
            break;
        }
        default: return false;
    }
    return true;
}

// Globals, calls (recorded, never made), BUILD state, persistent ids.
bool Interpreter::object_opcode() {
    switch (opcode_) {
        case kGlobal: {
            const std::string_view module = read_line("GLOBAL module");
            const std::string_view name = read_line("GLOBAL name");
            // Python decodes both as UTF-8; they end up in messages and the scan's JSON.
            check_utf8(module);
            check_utf8(name);
            push(make_global(module, name));
            break;
        }
        case kStackGlobal: {
            const ValuePtr name = pop("a STACK_GLOBAL name");
            const ValuePtr module = pop("a STACK_GLOBAL module");
            if (module->kind != Kind::String || name->kind != Kind::String) {
                fail("STACK_GLOBAL needs two strings, got " + describe(*module) + " and " +
                     describe(*name));
            }
            push(make_global(module->text, name->text));
            break;
        }
        case kReduce: {
            const ValuePtr args = pop("REDUCE arguments");
            const ValuePtr callable = pop("a callable for REDUCE");
            push(reduce(callable, args));
            break;
        }
        case kNewObj: {
            const ValuePtr args = pop("NEWOBJ arguments");
            const ValuePtr cls = pop("a class for NEWOBJ");
            push(make_object(cls, args, true));
            break;
        }
        case kNewObjEx: {
            const ValuePtr kwargs = pop("NEWOBJ_EX keyword arguments");
            const ValuePtr args = pop("NEWOBJ_EX arguments");
            const ValuePtr cls = pop("a class for NEWOBJ_EX");
            if (kwargs->kind != Kind::Dict) {
                fail("NEWOBJ_EX keyword arguments must be a dict, got " + describe(*kwargs));
            }
            ValuePtr object = make_object(cls, args, true);
            // Keyword arguments go to the Object's entries, its only keyed slot.
            std::vector<ValuePtr> flat_pairs;
            for (const auto& [key, value] : kwargs->entries) {
                flat_pairs.push_back(key);
                flat_pairs.push_back(value);
            }
            set_items(object, std::move(flat_pairs), "NEWOBJ_EX");
            push(std::move(object));
            break;
        }
        case kInst: {
            const std::string_view module = read_line("INST module");
            const std::string_view name = read_line("INST name");
            ValuePtr args = make_sequence(Kind::Tuple, pop_to_mark());
            push(make_object(make_global(module, name), args, false));
            break;
        }
        case kObj: {
            std::vector<ValuePtr> items = pop_to_mark();
            if (items.empty()) fail("OBJ needs a class after its MARK");
            const ValuePtr cls = std::move(items.front());
            items.erase(items.begin());
            push(make_object(cls, make_sequence(Kind::Tuple, std::move(items)), false));
            break;
        }
        case kBuild: {
            ValuePtr state = pop("a state for BUILD");
            const ValuePtr& target = top("a value for BUILD");
            if (target->kind != Kind::Object && target->kind != Kind::Dict) {
                fail("BUILD needs an object below its state, got " + describe(*target));
            }
            check_changeable(target, "BUILD");
            if (target->state) fail("BUILD on a " + describe(*target) + " that has a state");
            attach(*target, state);
            target->state = std::move(state);
            break;
        }
        case kBinPersId: push(make_persistent_id(pop("a persistent id"))); break;
        case kPersId:
            push(make_persistent_id(make_text(Kind::String, read_line("PERSID"))));
            break;
        case kExt1:
        case kExt2:
        case kExt4: fail("extension registry codes (EXT1/EXT2/EXT4) are not supported");
        default: return false;
    }
    return true;
}

// The memo: PUT and GET by index.
bool Interpreter::memo_opcode() {
    switch (opcode_) {
        case kPut: memo_put(read_decimal_index("PUT index")); break;
        case kBinPut: memo_put(read_le(1, "BINPUT index")); break;
        case kLongBinPut: memo_put(read_le(4, "LONG_BINPUT index")); break;
        case kMemoize: memo_put(memo_.size()); break;
        case kGet: memo_get(read_decimal_index("GET index")); break;
        case kBinGet: memo_get(read_le(1, "BINGET index")); break;
        case kLongBinGet: memo_get(read_le(4, "LONG_BINGET index")); break;
        default: return false;
    }
    return true;
}

}  // namespace

ValuePtr load(std::string_view bytes, const std::string& where, const Limits& limits) {
    return Interpreter(bytes, where, limits).run();
}

bool is_global(const Value& v, std::string_view module, std::string_view name) {
    return v.kind == Kind::Global && v.module == module && v.name == name;
}

const Value* object_class(const Value& v) {
    if (v.kind != Kind::Object || !v.callable || v.callable->kind != Kind::Global) return nullptr;
    return v.callable.get();
}

const Value* dict_get(const Value& dict, std::string_view key) {
    if (dict.kind != Kind::Dict) return nullptr;
    // A repeated key keeps the last value, as in Python.
    for (auto it = dict.entries.rbegin(); it != dict.entries.rend(); ++it) {
        if (it->first->kind == Kind::String && it->first->text == key) return it->second.get();
    }
    return nullptr;
}

std::string describe(const Value& v) {
    switch (v.kind) {
        case Kind::None: return "None";
        case Kind::Bool: return "bool";
        case Kind::Int:
        case Kind::BigInt: return "int";
        case Kind::Float: return "float";
        case Kind::String: return "str";
        case Kind::Bytes: return "bytes";
        case Kind::Tuple: return "tuple";
        case Kind::List: return "list";
        case Kind::Dict: return "dict";
        case Kind::Global: return v.module + "." + v.name;
        case Kind::Object: {
            const Value* cls = object_class(v);
            const std::string name = cls ? describe(*cls) : "object";
            return v.from_newobj ? name + " object" : name + "(...)";
        }
        case Kind::PersistentId: return "persistent id";
    }
    return "unknown value";
}

}  // namespace vmerge::pickle
