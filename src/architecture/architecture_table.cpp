#include "architecture/architecture_table.h"


#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "io/input_file.h"
#include "io/json_file.h"
#include "architecture/builtin_tables.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

constexpr int kTableVersion = 1;
constexpr uint64_t kMaxTableBytes = uint64_t{16} << 20;
const std::set<std::string> kTableKeys{"vmerge_architecture_table", "name", "source", "architectures",
                                       "config_check", "tensor_set", "keep_fp32", "mtp_shared_copies", "mtp_own_names", "rules",
                                       "notes"};
const std::set<std::string> kRuleKeys{"from", "to", "drop", "transform", "heads", "tied_head", "layer_offset",
                                      "split", "tp", "value_head", "groups", "stack_experts", "sections", "add",
                                      "note"};
const std::set<std::string> kSectionKeys{"rows", "part", "to"};
// torchtitan: name rules from torchtitan FQNs; megatron: from Megatron-core canonical names
// (global layer and expert numbers); hf: facts of the HF architecture itself (its tensor set,
// keep_fp32, mtp_shared_copies), applied whatever the checkpoint layout, and rules from the
// module names transformers uses at run time (what FSDP and DCP save) to the names its
// save_pretrained writes.
const std::set<std::string> kSources{"torchtitan", "megatron", "hf"};

// The placeholders a pattern uses, in order ("{i}", "{e}", "{*}"); anything else in braces is
// an Error.
std::vector<std::string> placeholders(const std::string& pattern, const std::string& where) {
    std::vector<std::string> found;
    for (size_t at = 0; (at = pattern.find('{', at)) != std::string::npos; ++at) {
        const std::string p = pattern.substr(at, 3);
        if (p != "{i}" && p != "{e}" && p != "{*}")
            throw Error(where + ": '" + pattern + "': only {i} (layer), {e} (expert) and {*} (the rest of the name) may "
                        "stand in braces");
        found.push_back(p);
    }
    return found;
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& where, bool required) {
    auto it = j.find(key);
    if (it == j.end()) {
        if (required) throw Error(where + ": '" + key + "' missing");
        return "";
    }
    if (!it->is_string() || it->get<std::string>().empty())
        throw Error(where + ": '" + key + "' must be a non-empty string");
    return it->get<std::string>();
}

std::vector<std::string> string_list(const nlohmann::json& j, const char* key, const std::string& where, bool required) {
    auto it = j.find(key);
    if (it == j.end()) {
        if (required) throw Error(where + ": '" + key + "' missing");
        return {};
    }
    if (!it->is_array() || (required && it->empty()))
        throw Error(where + ": '" + key + "' must be a" + (required ? " non-empty" : "n") + " array of strings");
    std::vector<std::string> out;
    for (const auto& v : *it) {
        if (!v.is_string() || v.get<std::string>().empty())
            throw Error(where + ": '" + key + "' must hold non-empty strings");
        out.push_back(v.get<std::string>());
    }
    return out;
}

void check_keys(const nlohmann::json& j, const std::set<std::string>& known, const std::string& where) {
    for (const auto& [key, value] : j.items())
        if (!known.count(key)) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            throw Error(where + ": unknown key '" + key + "' (expected " + list + ")");
        }
}

TableTransform parse_transform(const std::string& text, const std::string& where) {
    if (text.empty() || text == "none") return TableTransform::None;
    if (text == "rope_permute") return TableTransform::RopePermute;
    if (text == "split_experts") return TableTransform::SplitExperts;
    if (text == "split_experts_gate_up") return TableTransform::SplitExpertsGateUp;
    if (text == "transpose") return TableTransform::Transpose;
    if (text == "interleave_gate_up") return TableTransform::InterleaveGateUp;
    if (text == "transpose_interleave_gate_up") return TableTransform::TransposeInterleaveGateUp;
    throw Error(where + ": unknown transform '" + text +
                "' (expected none, rope_permute, split_experts, split_experts_gate_up, transpose, interleave_gate_up or "
                "transpose_interleave_gate_up)");
}

NameSplit parse_split(const std::string& text, const std::string& where) {
    if (text.empty() || text == "none") return NameSplit::None;
    if (text == "qkv") return NameSplit::Qkv;
    if (text == "gate_up") return NameSplit::GateUp;
    if (text == "vocab") return NameSplit::Vocab;
    if (text == "qkv_per_head") return NameSplit::QkvPerHead;
    if (text == "qkv_gated") return NameSplit::QkvGated;
    if (text == "grouped_sections") return NameSplit::GroupedSections;
    throw Error(where + ": unknown split '" + text +
                "' (expected none, qkv, qkv_per_head, qkv_gated, gate_up, grouped_sections or vocab)");
}

TpRule parse_tp(const std::string& text, const std::string& where) {
    if (text.empty() || text == "replicated") return TpRule::Replicated;
    if (text == "dim0") return TpRule::Concat0;
    if (text == "dim1") return TpRule::Concat1;
    if (text == "glu_halves") return TpRule::GluHalves;
    if (text == "replicated_if_full") return TpRule::ReplicatedIfFull;
    if (text == "sections") return TpRule::Sections;
    throw Error(where + ": unknown tp '" + text +
                "' (expected dim0, dim1, replicated, glu_halves, replicated_if_full or sections)");
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& where) {
    auto it = j.find(key);
    if (it == j.end()) return false;
    if (!it->is_boolean()) throw Error(where + ": '" + key + "' must be true or false");
    return it->get<bool>();
}

// A rule's `to`: one HF name, or the `want` names a split makes (`what`: "qkv: q, k, v"),
// kept joined by '|' (split_names takes them apart).
std::string rule_targets(const nlohmann::json& j, size_t want, const std::string& what, const std::string& where) {
    auto it = j.find("to");
    if (it == j.end()) return "";
    std::vector<std::string> names;
    if (it->is_string()) names.push_back(it->get<std::string>());
    else if (it->is_array())
        for (const auto& v : *it) names.push_back(v.is_string() ? v.get<std::string>() : "");
    if (names.size() != want || std::any_of(names.begin(), names.end(), [](const std::string& n) {
            return n.empty() || n.find('|') != std::string::npos;
        }))
        throw Error(where + ": 'to' must be " +
                    (want == 1 ? std::string("one HF name (a string)")
                               : "a list of " + std::to_string(want) + " HF names (split " + what + ")"));
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : "|") + n;
    return joined;
}

// How many HF names a split makes, and which (for messages).
std::pair<size_t, std::string> split_targets(NameSplit split, const std::vector<TableSection>& sections) {
    switch (split) {
        case NameSplit::Qkv: return {3, "qkv: q, k, v"};
        case NameSplit::QkvGated: return {3, "qkv_gated: q (with its gate heads), k, v"};
        case NameSplit::GateUp: return {2, "gate_up: gate, up"};
        case NameSplit::GroupedSections: {
            size_t most = 0;
            for (const auto& s : sections) most = std::max(most, s.to + 1);
            return {most, "grouped_sections: one for each 'to' its sections name"};
        }
        default: return {1, ""};
    }
}

// A rule's `sections`: [{"rows": EXPR, "part": NAME, "to": N}, ...] (TableSection).
std::vector<TableSection> parse_sections(const nlohmann::json& j, const std::string& where) {
    auto it = j.find("sections");
    if (it == j.end()) return {};
    if (!it->is_array() || it->size() < 2) throw Error(where + ": 'sections' must be a list of at least two objects");
    std::vector<TableSection> out;
    for (size_t n = 0; n < it->size(); ++n) {
        const auto& v = (*it)[n];
        const std::string at = where + ": section " + std::to_string(n);
        if (!v.is_object()) throw Error(at + ": expected an object");
        check_keys(v, kSectionKeys, at);
        TableSection s;
        const auto rows = v.find("rows");
        if (rows == v.end() || !(rows->is_string() || rows->is_number_integer()))
            throw Error(at + ": 'rows' (an expression over config.json, or a number) missing");
        const std::string text = rows->is_string() ? rows->get<std::string>() : std::to_string(rows->get<int64_t>());
        s.rows = ConfigExpression::parse(text, at + ": 'rows'");
        s.part = string_field(v, "part", at, false);
        if (const auto to = v.find("to"); to != v.end()) {
            if (!to->is_number_unsigned()) throw Error(at + ": 'to' must be an index into the rule's 'to' list");
            s.to = to->get<size_t>();
        }
        out.push_back(std::move(s));
    }
    const auto parts = std::count_if(out.begin(), out.end(), [](const TableSection& s) { return !s.part.empty(); });
    if (parts != 0 && parts != static_cast<std::ptrdiff_t>(out.size()))
        throw Error(where + ": give every section a 'part' (its torch_dist tensor's suffix) or none");
    return out;
}

// The sections agree with the tp rule and split that use them.
void check_sections(const TableRule& rule, const std::string& where) {
    const bool used = rule.tp == TpRule::Sections || rule.split == NameSplit::GroupedSections;
    if (used != !rule.sections.empty())
        throw Error(where + ": 'sections' go with tp sections or split grouped_sections, and those need them");
    const size_t targets = split_targets(rule.split, rule.sections).first;
    for (size_t n = 0; n < rule.sections.size(); ++n)
        if (rule.split != NameSplit::GroupedSections && rule.sections[n].to != 0)
            throw Error(where + ": section " + std::to_string(n) + ": 'to' is for split grouped_sections");
    for (size_t n = 0; rule.split == NameSplit::GroupedSections && n < targets; ++n)
        if (std::none_of(rule.sections.begin(), rule.sections.end(), [&](const TableSection& s) { return s.to == n; }))
            throw Error(where + ": no section goes to 'to' " + std::to_string(n));
}

// The Megatron-only keys of a rule; a torchtitan rule may not use them (nor a Megatron rule
// the torchtitan keys, but for the transforms of a fused expert tensor, see parse_rule).
void parse_megatron_fields(const nlohmann::json& j, TableRule& rule, bool megatron, const std::string& where) {
    for (const char* key : {"split", "tp", "value_head", "groups", "stack_experts", "sections", "add"})
        if (!megatron && j.contains(key)) throw Error(where + ": '" + key + "' belongs to source 'megatron' tables");
    for (const char* key : {"heads", "layer_offset"})
        if (megatron && j.contains(key)) throw Error(where + ": '" + key + "' belongs to source 'torchtitan' tables");
    if (!megatron) return;
    rule.split = parse_split(string_field(j, "split", where, false), where);
    rule.tp = parse_tp(string_field(j, "tp", where, false), where);
    rule.value_head = bool_field(j, "value_head", where);
    rule.sections = parse_sections(j, where);
    const auto [want, what] = split_targets(rule.split, rule.sections);
    rule.to = rule_targets(j, want, what, where);
    check_sections(rule, where);
    const std::string groups = string_field(j, "groups", where, false);
    const bool grouped = rule.split == NameSplit::QkvPerHead || rule.split == NameSplit::GroupedSections;
    if (grouped != !groups.empty())
        throw Error(where + ": 'groups' (an expression over config.json giving the group count) goes with split "
                    "qkv_per_head or grouped_sections, and only there");
    if (!groups.empty()) rule.groups = ConfigExpression::parse(groups, where + ": 'groups'");
    const std::string stack = string_field(j, "stack_experts", where, false);
    if (!stack.empty()) rule.stack_experts = ConfigExpression::parse(stack, where + ": 'stack_experts'");
    if (const auto add = j.find("add"); add != j.end()) {
        if (!add->is_number() || !std::isfinite(add->get<double>()))
            throw Error(where + ": 'add' must be a number (added to every value)");
        rule.add = add->get<double>();
    }
}

// A rule's layer_offset: an expression over config.json, for a rule that maps a layer number ({i}
// in both `from` and `to`) to a name.
void parse_layer_offset(const nlohmann::json& j, TableRule& rule, const std::vector<std::string>& from_marks,
                        const std::string& where) {
    const std::string text = string_field(j, "layer_offset", where, false);
    if (text.empty()) return;
    const bool binds_layer = std::find(from_marks.begin(), from_marks.end(), "{i}") != from_marks.end();
    if (!binds_layer || rule.to.find("{i}") == std::string::npos)
        throw Error(where + ": 'layer_offset' moves the layer number {i}, which 'from' and 'to' must both hold");
    rule.layer_offset = ConfigExpression::parse(text, where + ": 'layer_offset'");
}

TableRule parse_rule(const nlohmann::json& j, size_t index, const std::string& file, bool megatron) {
    std::string where = file + ": rule " + std::to_string(index);
    if (!j.is_object()) throw Error(where + ": expected an object");
    TableRule rule;
    rule.index = index;
    rule.from = string_field(j, "from", where, true);
    where += " (from '" + rule.from + "')";
    check_keys(j, kRuleKeys, where);
    rule.transform = parse_transform(string_field(j, "transform", where, false), where);
    if (megatron) parse_megatron_fields(j, rule, true, where);
    else {
        parse_megatron_fields(j, rule, false, where);
        // split_experts_gate_up names the gate and the up tensor: a list of two, as a gate_up split.
        rule.to = rule.transform == TableTransform::SplitExpertsGateUp ? rule_targets(j, 2, "gate_up: gate, up", where)
                                                                       : string_field(j, "to", where, false);
    }
    rule.drop = string_field(j, "drop", where, false);
    if (rule.to.empty() == rule.drop.empty()) throw Error(where + ": give exactly one of 'to' (its HF name) and 'drop' (why)");
    rule.heads = string_field(j, "heads", where, false);
    if ((rule.transform == TableTransform::RopePermute) != !rule.heads.empty())
        throw Error(where + ": 'heads' (the config.json key of the head count) goes with transform rope_permute, and only there");
    rule.tied_head = bool_field(j, "tied_head", where);
    if (!rule.drop.empty() && (rule.transform != TableTransform::None || rule.tied_head || rule.split != NameSplit::None ||
                               rule.value_head))
        throw Error(where + ": a 'drop' rule takes no transform, split, tied_head or value_head");
    const auto from_marks = placeholders(rule.from, where);
    for (const char* mark : {"{i}", "{e}", "{*}"})
        if (std::count(from_marks.begin(), from_marks.end(), mark) > 1)
            throw Error(where + ": each placeholder may appear once in 'from'");
    if (rule.from.find("{*}") != std::string::npos && !rule.from.ends_with("{*}"))
        throw Error(where + ": {*} (the rest of the name) may only end 'from'");
    parse_layer_offset(j, rule, from_marks, where);
    const bool from_expert = std::count(from_marks.begin(), from_marks.end(), "{e}") > 0;
    const bool splits = rule.transform == TableTransform::SplitExperts || rule.transform == TableTransform::SplitExpertsGateUp;
    for (const auto& mark : placeholders(rule.to, where + ": 'to'")) {
        const bool made_here = mark == "{e}" && splits;
        if (!made_here && std::find(from_marks.begin(), from_marks.end(), mark) == from_marks.end())
            throw Error(where + ": 'to' uses " + mark + ", which 'from' does not bind");
    }
    if (rule.stack_experts && (!from_expert || rule.to.find("{e}") != std::string::npos || !rule.drop.empty()))
        throw Error(where + ": stack_experts takes per-expert tensors ({e} in 'from') into one fused tensor (a 'to' "
                    "without {e})");
    // A Megatron rule transforms only what it stacks: the fused [E, ...] tensor, once all its
    // experts are in (GPT-OSS's experts, stored transposed and with gate and up interleaved).
    const bool fused_transform = rule.transform == TableTransform::Transpose ||
                                 rule.transform == TableTransform::InterleaveGateUp ||
                                 rule.transform == TableTransform::TransposeInterleaveGateUp;
    if (megatron && rule.transform != TableTransform::None && (!fused_transform || !rule.stack_experts))
        throw Error(where + ": a megatron rule's transform (transpose, interleave_gate_up or "
                    "transpose_interleave_gate_up) applies to the tensor stack_experts fuses, and needs it");
    if (splits && (from_expert || rule.to.find("{e}") == std::string::npos))
        throw Error(where + ": " + table_transform_name(rule.transform) +
                    " takes a grouped tensor (no {e} in 'from') to per-expert names ({e} in 'to')");
    return rule;
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

}  // namespace

bool match_pattern(const std::string& pattern, const std::string& key, TableMatch& m) {
    size_t p = 0, k = 0;
    while (p < pattern.size()) {
        if (pattern.compare(p, 3, "{*}") == 0) {
            m.rest = key.substr(k);
            return !m.rest.empty();
        }
        if (pattern.compare(p, 3, "{i}") == 0 || pattern.compare(p, 3, "{e}") == 0) {
            const size_t start = k;
            while (k < key.size() && is_digit(key[k])) ++k;
            if (k == start) return false;
            (pattern[p + 1] == 'i' ? m.layer : m.expert) = key.substr(start, k - start);
            p += 3;
            continue;
        }
        if (k >= key.size() || key[k] != pattern[p]) return false;
        ++p;
        ++k;
    }
    return k == key.size();
}

namespace {

fs::path running_binary_dir() {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : exe.parent_path();
}

}  // namespace

const char* name_split_name(NameSplit s) {
    switch (s) {
        case NameSplit::None: return "none";
        case NameSplit::Qkv: return "qkv";
        case NameSplit::GateUp: return "gate_up";
        case NameSplit::Vocab: return "vocab";
        case NameSplit::QkvPerHead: return "qkv_per_head";
        case NameSplit::QkvGated: return "qkv_gated";
        case NameSplit::GroupedSections: return "grouped_sections";
    }
    return "none";
}

const char* tp_rule_name(TpRule r) {
    switch (r) {
        case TpRule::Concat0: return "dim0";
        case TpRule::Concat1: return "dim1";
        case TpRule::Replicated: return "replicated";
        case TpRule::GluHalves: return "glu_halves";
        case TpRule::ReplicatedIfFull: return "replicated_if_full";
        case TpRule::Sections: return "sections";
    }
    return "replicated";
}

const char* table_transform_name(TableTransform t) {
    switch (t) {
        case TableTransform::None: return "none";
        case TableTransform::RopePermute: return "rope_permute";
        case TableTransform::SplitExperts: return "split_experts";
        case TableTransform::SplitExpertsGateUp: return "split_experts_gate_up";
        case TableTransform::Transpose: return "transpose";
        case TableTransform::InterleaveGateUp: return "interleave_gate_up";
        case TableTransform::TransposeInterleaveGateUp: return "transpose_interleave_gate_up";
    }
    return "none";
}

ArchitectureTable parse_architecture_table(const std::string& file, const nlohmann::json& doc) {
    if (!doc.is_object()) throw Error(file + ": expected a JSON object (an architecture table)");
    check_keys(doc, kTableKeys, file);
    auto version = doc.find("vmerge_architecture_table");
    if (version == doc.end() || !version->is_number_integer() || version->get<int64_t>() != kTableVersion)
        throw Error(file + ": 'vmerge_architecture_table' must be " + std::to_string(kTableVersion) +
                    " (the table format version)");
    ArchitectureTable table;
    table.file = file;
    table.name = string_field(doc, "name", file, true);
    table.source = string_field(doc, "source", file, true);
    if (!kSources.count(table.source))
        throw Error(file + ": source '" + table.source + "': expected torchtitan, megatron or hf");
    table.architectures = string_list(doc, "architectures", file, true);
    table.config_check = string_field(doc, "config_check", file, false);
    table.keep_fp32 = string_list(doc, "keep_fp32", file, false);
    for (const auto& pattern : table.keep_fp32) placeholders(pattern, file + ": keep_fp32");
    table.mtp_shared_copies = bool_field(doc, "mtp_shared_copies", file);
    if (table.mtp_shared_copies && table.source != "hf")
        throw Error(file + ": 'mtp_shared_copies' belongs to source 'hf' tables (a fact of the HF release)");
    table.mtp_own_names = bool_field(doc, "mtp_own_names", file);
    if (table.mtp_own_names && table.source != "megatron")
        throw Error(file + ": 'mtp_own_names' belongs to source 'megatron' tables");
    if (auto set = doc.find("tensor_set"); set != doc.end()) {
        if (table.source != "hf") throw Error(file + ": 'tensor_set' belongs to source 'hf' tables (a fact of the HF architecture)");
        table.tensor_set = parse_tensor_set(*set, file);
    }
    auto rules = doc.find("rules");
    if (table.source == "hf") {
        if (table.keep_fp32.empty() && !table.mtp_shared_copies && !table.tensor_set && rules == doc.end())
            throw Error(file + ": a source 'hf' table needs 'tensor_set', 'rules', 'keep_fp32' or 'mtp_shared_copies'");
        if (rules == doc.end()) return table;
    }
    if (rules == doc.end() || !rules->is_array() || rules->empty()) throw Error(file + ": 'rules' must be a non-empty array");
    std::map<std::string, size_t> seen;
    for (size_t i = 0; i < rules->size(); ++i) {
        TableRule rule = parse_rule((*rules)[i], i, file, table.source == "megatron");
        // A value model's head rule may share its `from` with the causal LM's.
        if (auto [it, fresh] = seen.emplace(rule.from + (rule.value_head ? " (value head)" : ""), i); !fresh)
            throw Error(file + ": rule " + std::to_string(i) + " (from '" + rule.from + "'): same 'from' as rule " +
                        std::to_string(it->second));
        table.rules.push_back(std::move(rule));
    }
    return table;
}

namespace {

constexpr const char* kBuiltinPrefix = "builtin:";
constexpr const char* kTablesEnv = "VMERGE_ARCHITECTURE_TABLES";

// The *.json files of a folder, sorted.
std::vector<fs::path> json_files_in(const std::string& dir) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
        if (entry.path().extension() == ".json") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
}

// Adds a folder's tables: a file named like an earlier table replaces it in place, others follow.
void overlay_folder(std::vector<std::string>& files, const std::string& dir) {
    for (const fs::path& file : json_files_in(dir)) {
        const std::string name = file.filename().string();
        auto same = std::find_if(files.begin(), files.end(),
                                 [&](const std::string& f) { return fs::path(f).filename().string() == name; });
        if (same != files.end()) *same = file.string();
        else files.push_back(file.string());
    }
}

}  // namespace

std::string read_architecture_table_text(const std::string& file) {
    if (file.starts_with(kBuiltinPrefix)) {
        for (const BuiltinTable& table : builtin_architecture_tables())
            if (file == kBuiltinPrefix + std::string(table.name)) return table.text;
        throw Error(file + ": no such built-in architecture table");
    }
    return read_small_file(file, kMaxTableBytes, "an architecture table");  // read_once inside
}

ArchitectureTable read_architecture_table(const std::string& file) {
    return parse_architecture_table(file, parse_json_text(read_architecture_table_text(file), file));
}

std::string shipped_tables_dir() {
    const fs::path bin = running_binary_dir();
    std::error_code ec;
    for (const fs::path& dir : {bin / "share/vmerge/architectures", bin / "../share/vmerge/architectures"})
        if (!bin.empty() && fs::is_directory(dir, ec)) return fs::weakly_canonical(dir, ec).string();
    return "";
}

std::string table_folders_text() {
    std::string text = "built in";
    if (const std::string dir = shipped_tables_dir(); !dir.empty()) text += ", " + dir;
    if (const char* env = std::getenv(kTablesEnv); env && *env) text += ", " + std::string(env) + " ($" + kTablesEnv + ")";
    return text;
}

std::vector<std::string> architecture_table_files(const std::vector<std::string>& extra_files) {
    std::vector<std::string> files;
    for (const BuiltinTable& table : builtin_architecture_tables()) files.push_back(kBuiltinPrefix + std::string(table.name));
    if (const std::string dir = shipped_tables_dir(); !dir.empty()) overlay_folder(files, dir);
    if (const char* env = std::getenv(kTablesEnv); env && *env) {
        std::error_code ec;
        if (!fs::is_directory(env, ec))
            throw Error(std::string("$") + kTablesEnv + "=" + env + ": not a folder of architecture tables");
        overlay_folder(files, env);
    }
    files.insert(files.end(), extra_files.begin(), extra_files.end());
    return files;
}

ArchitectureTables load_architecture_tables(const std::vector<std::string>& extra_files) {
    std::vector<ArchitectureTable> tables;
    for (const auto& file : architecture_table_files(extra_files)) {
        ArchitectureTable table = read_architecture_table(file);
        // A later table takes the (source, architecture) pairs it names from earlier ones.
        for (auto& earlier : tables)
            std::erase_if(earlier.architectures, [&](const std::string& a) {
                return earlier.source == table.source &&
                       std::find(table.architectures.begin(), table.architectures.end(), a) != table.architectures.end();
            });
        tables.push_back(std::move(table));
    }
    return tables;
}

const ArchitectureTable* find_architecture_table(const std::vector<ArchitectureTable>& tables, const std::string& source,
                                                 const std::string& architecture) {
    for (const auto& table : tables)
        if (table.source == source &&
            std::find(table.architectures.begin(), table.architectures.end(), architecture) != table.architectures.end())
            return &table;
    return nullptr;
}

std::string table_architectures(const std::vector<ArchitectureTable>& tables, const std::string& source) {
    std::string out;
    for (const auto& table : tables)
        if (table.source == source)
            for (const auto& a : table.architectures) out += (out.empty() ? "" : ", ") + a;
    return out.empty() ? "none" : out;
}

std::optional<TableMatch> match_table_rule(const ArchitectureTable& table, const std::string& key) {
    for (const TableRule& rule : table.rules) {
        TableMatch m;
        m.rule = &rule;
        if (match_pattern(rule.from, key, m)) return m;
    }
    return std::nullopt;
}

std::string fill_table_pattern(const std::string& pattern, const std::string& layer, const std::string& expert,
                               const std::string& rest) {
    std::string out = pattern;
    for (auto [mark, value] : {std::pair{std::string("{i}"), layer}, std::pair{std::string("{e}"), expert},
                               std::pair{std::string("{*}"), rest}})
        for (size_t at = 0; (at = out.find(mark, at)) != std::string::npos; at += value.size()) out.replace(at, mark.size(), value);
    return out;
}

bool table_keeps_fp32(const ArchitectureTable& table, const std::string& name) {
    TableMatch m;
    for (const auto& pattern : table.keep_fp32)
        if (match_pattern(pattern, name, m)) return true;
    return false;
}

}  // namespace vmerge
