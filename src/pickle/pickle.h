#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// A data-only pickle interpreter (protocols 2-5). It builds a tree of values and never calls
// anything: a GLOBAL is only a name, REDUCE/NEWOBJ only record "this callable with these
// arguments". The torch layer (torch_pickle.h) gives meaning to the globals it knows.
namespace vmerge::pickle {

struct Value;
using ValuePtr = std::shared_ptr<Value>;

enum class Kind {
    None, Bool, Int, BigInt, Float, String, Bytes,
    Tuple, List, Dict,
    Global,        // module + name, e.g. "torch" "FloatStorage"
    Object,        // REDUCE (callable(args)) or NEWOBJ (cls.__new__(cls, *args)), state from BUILD
    PersistentId,  // BINPERSID / PERSID: `args` holds the persistent id value
};

struct Value {
    Kind kind = Kind::None;
    bool boolean = false;
    int64_t integer = 0;
    double real = 0.0;
    std::string text;       // String (UTF-8), Bytes (raw), BigInt (little-endian two's complement)
    std::string module;     // Global
    std::string name;       // Global
    std::vector<ValuePtr> items;                              // Tuple, List
    std::vector<std::pair<ValuePtr, ValuePtr>> entries;       // Dict, in insertion order
    ValuePtr callable;      // Object: the Global (or other value) that was called / instantiated
    ValuePtr args;          // Object: argument tuple; PersistentId: the id
    ValuePtr state;         // set by BUILD (on an Object or a Dict such as OrderedDict._metadata)
    bool from_newobj = false;
    uint32_t depth = 1;     // nesting depth of this value's tree, bounded by Limits::max_depth
    // Inside another value already (an item, entry, argument, state...): it may no longer change.
    // A flag on the value rather than a set of the values placed, which cost a hash insert per
    // value and kept every value of the pickle alive until the end (docs/scaling.md).
    bool placed = false;
};

struct Limits {
    uint32_t max_depth = 200;          // nesting of containers/objects
    uint64_t max_memo = 1u << 22;      // memo entries
    uint64_t max_values = 1u << 24;    // values created in total
    uint64_t max_stack = 1u << 22;     // stack + mark stack entries
};

// Interprets `bytes` (a whole pickle up to STOP). `where` names the source in messages
// (e.g. "ckpt/model_world_size_2_rank_0.pt:data.pkl"); errors add the opcode offset.
ValuePtr load(std::string_view bytes, const std::string& where, const Limits& limits = {});

// Small accessors used by the interpreters of the tree.
bool is_global(const Value& v, std::string_view module, std::string_view name);
// The callable's Global of an Object, or nullptr.
const Value* object_class(const Value& v);
// Dict lookup by string key; nullptr when absent or when `dict` is not a Dict.
const Value* dict_get(const Value& dict, std::string_view key);
// "None", "int", "tuple", "torch.FloatStorage" ... for error messages.
std::string describe(const Value& v);

}  // namespace vmerge::pickle
