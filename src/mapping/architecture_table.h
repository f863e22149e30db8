#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace vmerge {

// How one checkpoint tensor becomes its Hugging Face tensor(s) under a table rule. Each is a
// pure regrouping of rows, planned as box copies (no element-wise path).
enum class TableTransform {
    None,          // same tensor, new name
    RopePermute,   // per head, rows 2p + j -> j*(d/2) + p (interleaved RoPE -> HF rotate-half)
    SplitExperts,  // a grouped [E, ...] tensor -> one tensor per expert ({e} in `to`)
};

// One rule of an architecture table: the checkpoint key pattern `from` ({i}: a layer number)
// and either its HF name `to` or the reason it is dropped.
struct TableRule {
    size_t index = 0;  // position in the file's "rules", for messages
    std::string from;
    std::string to;                      // "" when dropped
    std::string drop;                    // why the tensor is not written ("" when mapped)
    TableTransform transform = TableTransform::None;
    std::string heads;                   // RopePermute: the config.json key giving the head count
    bool tied_head = false;              // not written when config.json ties the embeddings
};

// An architecture table (share/vmerge/architectures/*.json, docs/architecture-tables.md): the
// name rules of one checkpoint layout (`source`, e.g. "torchtitan") for the HF architectures
// it lists.
struct ArchitectureTable {
    std::string file;
    std::string name;
    std::string source;
    std::vector<std::string> architectures;
    // The known architecture whose config.json-implied tensor set the output is checked
    // against ("" : the output is not checked, with a note).
    std::string config_check;
    // HF name patterns ({i}, {e}) written in float32 whatever --dtype auto picks.
    std::vector<std::string> keep_fp32;
    std::vector<TableRule> rules;
};

// Parses and validates one table (Error "<file>: rule N (from '...'): ..." or "<file>: ...").
ArchitectureTable parse_architecture_table(const std::string& file, const nlohmann::json& doc);
ArchitectureTable read_architecture_table(const std::string& file);

// The folder of the tables shipped with vmerge: share/vmerge/architectures next to the
// running binary (a build tree) or in ../share (an installed prefix); "" when neither exists.
std::string shipped_tables_dir();

// The table files: the shipped ones (sorted), then `extra_files` (--architecture_table).
std::vector<std::string> architecture_table_files(const std::vector<std::string>& extra_files);
// One table file's text (read_small_file, so through read_once: rank 0 reads, the others replay).
std::string read_architecture_table_text(const std::string& file);

// The tables of architecture_table_files in order; a later table replaces an earlier one for
// each (source, architecture) it lists.
std::vector<ArchitectureTable> load_architecture_tables(const std::vector<std::string>& extra_files);

// The table for HF `architecture` read from `source` checkpoints; nullptr when none.
const ArchitectureTable* find_architecture_table(const std::vector<ArchitectureTable>& tables,
                                                 const std::string& source, const std::string& architecture);
// "LlamaForCausalLM, Qwen3ForCausalLM" of the tables for `source`.
std::string table_architectures(const std::vector<ArchitectureTable>& tables, const std::string& source);

// The rule whose `from` matches `key`, with `{i}` bound to the key's layer number.
struct TableMatch {
    const TableRule* rule = nullptr;
    std::string layer;   // "" when the pattern has no {i}
    std::string expert;  // "" when the pattern has no {e}
};
std::optional<TableMatch> match_table_rule(const ArchitectureTable& table, const std::string& key);

// `pattern` with {i} and {e} replaced.
std::string fill_table_pattern(const std::string& pattern, const std::string& layer, const std::string& expert);

// True when HF `name` matches one of the table's keep_fp32 patterns.
bool table_keeps_fp32(const ArchitectureTable& table, const std::string& name);

const char* table_transform_name(TableTransform t);

}  // namespace vmerge
