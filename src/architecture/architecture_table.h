#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "architecture/tensor_set.h"

namespace vmerge {

// How one checkpoint tensor becomes its Hugging Face tensor(s) under a table rule, planned as
// box copies (no element-wise arithmetic).
enum class TableTransform {
    None,          // same tensor, new name
    RopePermute,   // per head, rows 2p + j -> j*(d/2) + p (interleaved RoPE -> HF rotate-half)
    SplitExperts,  // a grouped [E, ...] tensor -> one tensor per expert ({e} in `to`)
    // A grouped [E, 2F, ...] tensor whose rows are [gate; up] per expert -> the gate and the up
    // tensor [F, ...] of each expert (`to` names both; transformers 5's fused MoE experts).
    SplitExpertsGateUp,
    // The last two axes swapped ([..., a, b] -> [..., b, a]): a grouped expert tensor stored
    // [E, out, in] whose Hugging Face form is [E, in, out] (GPT-OSS). Copies read a transposed
    // view of their source, so this one is a strided copy, not a regrouping of rows.
    Transpose,
    // The last axis's [gate | up] halves interleaved, column 2j + k taking column k*F + j
    // (GPT-OSS's gate_up_proj and its bias, as transformers stores them). Copies write one half's
    // columns at stride 2 through the tensor's copies_view [.., F, 2].
    InterleaveGateUp,
    // Transpose, then InterleaveGateUp: a Megatron expert's fused fc1 [2F, H] ([gate; up] rows)
    // stacked [E, 2F, H] as GPT-OSS's gate_up_proj [E, H, 2F].
    TransposeInterleaveGateUp,
};

// How a Megatron tensor splits into HF tensors (source 'megatron' tables).
enum class NameSplit {
    None,    // same tensor, new name
    Qkv,     // grouped [q heads, k, v] per query group -> q_proj | k_proj | v_proj
    GateUp,  // [gate; up] -> gate | up
    Vocab,   // rows trimmed (or zero-padded) to config vocab_size
    // Rows grouped per head [q_h; k_h; v_h] (`groups` heads, no GQA) -> ONE tensor [Q; K; V], as
    // a ViT's fused qkv (Qwen2.5-VL's visual.blocks.{i}.attn.qkv) holds them.
    QkvPerHead,
    // Megatron's gated attention (attention_output_gate, Qwen3-Next): rows per query group [its
    // nq/ng q heads; their gate heads; k head; v head] -> q_proj holding per head [q_h; gate_h]
    // (2 nq d rows) | k_proj | v_proj.
    QkvGated,
    // A tensor of `sections` (concatenated on dim 0), each cut into `groups` equal chunks -> one
    // HF tensor per `to`, holding per group g chunk g of each of its sections in order (the
    // gated delta-net's in_proj [Q; K; V; Z; B; A] -> in_proj_qkvz and in_proj_ba, per key head).
    GroupedSections,
};

// How the tensor-parallel shards of one Megatron tensor combine (docs/reference/megatron-formats.md
// §2): concatenated on dim 0 or 1, read once from tp rank 0, SwiGLU [gate_r; up_r] halves, or (MLA
// down-projections) replicated when one shard already has the full row count, else concatenated on
// dim 0.
// Sections: the rule's `sections` concatenated, each split over the ranks, every rank holding
// [s0_r; s1_r; ...] (GluHalves with more and unequal sections: the gated delta-net's in_proj and
// conv1d).
enum class TpRule { Concat0, Concat1, Replicated, GluHalves, ReplicatedIfFull, Sections };

// One row section of a Megatron tensor made of several (a rule's `sections`, dim 0, in order).
struct TableSection {
    ConfigExpression rows;  // its row count over the whole tensor, an expression over config.json
    // Its tensor's name suffix in a torch_dist save, which keeps each section a tensor of its own
    // (`<from>.<part>`): they are joined back into one before the rule applies. "" : none.
    std::string part;
    size_t to = 0;  // GroupedSections: the index in `to` of the HF tensor it goes to
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
    // Added to the matched layer number where `to` says {i}: a layout that numbers some blocks
    // apart from the decoder's (torchtitan's MTP depth k, mtp_layers.{k}, is HF layer
    // num_hidden_layers + k). An expression over config.json; source 'torchtitan' and 'hf' only.
    std::optional<ConfigExpression> layer_offset;
    // Source 'megatron' only: the HF names of a split (`to` holds them joined by '|'), how the
    // TP shards combine, and whether the rule names a value model's (critic's) score head,
    // applied only to value models and before the other rules.
    NameSplit split = NameSplit::None;
    TpRule tp = TpRule::Replicated;
    bool value_head = false;
    // QkvPerHead only: the head count (an expression over config.json, e.g. vision_config.num_heads).
    std::optional<ConfigExpression> groups;
    // Source 'megatron' only: the expert count E (an expression over config.json). `from` binds
    // {e} and `to` names one fused tensor (no {e}): each expert's tensor(s) land at index e of a
    // new leading axis, [E, ...] (transformers 5's fused mlp.experts.gate_up_proj / down_proj).
    std::optional<ConfigExpression> stack_experts;
    // Source 'megatron' only: the row sections of the tensor (TpRule::Sections, GroupedSections,
    // torch_dist parts), and their row counts once config.json is known (architecture_for).
    std::vector<TableSection> sections;
    std::vector<int64_t> section_rows;
    // Source 'megatron' only: the HF value is the checkpoint's plus this (megatron-core's
    // zero-centred norm gamma w is w + 1 in a plain HF norm); 0: copied as it is.
    double add = 0;
};

// An architecture table (share/vmerge/architectures/*.json, docs/architecture-tables.md): the
// name rules of one checkpoint layout (`source`, e.g. "torchtitan") for the HF architectures
// it lists.
struct ArchitectureTable {
    std::string file;
    std::string name;
    std::string source;
    std::vector<std::string> architectures;
    // The architecture whose tensor set (an 'hf' table's tensor_set) the output is checked
    // against; "" : the table's own architecture (its tensors unchecked, with a note, when no
    // 'hf' table gives it a tensor set).
    std::string config_check;
    // Source 'hf': the tensors config.json implies (tensor_set.h).
    std::optional<TensorSet> tensor_set;
    // HF name patterns ({i}, {e}) written in float32 whatever --dtype auto picks.
    std::vector<std::string> keep_fp32;
    // Source 'hf': the architecture's release holds, in every multi-token prediction layer
    // model.layers.{L+k}, copies embed_tokens.weight and shared_head.head.weight of
    // model.embed_tokens.weight and lm_head.weight (DeepSeek-V3; vLLM's MTP loader reads them).
    bool mtp_shared_copies = false;
    // Source 'megatron': the MTP block's keys (mtp.layers.{k}.*) are matched as they are, by rules
    // of their own, not as decoder layer L + k (Qwen3-Next's release keeps its MTP under mtp.*).
    bool mtp_own_names = false;
    std::vector<TableRule> rules;
};

// Parses and validates one table (Error "<file>: rule N (from '...'): ..." or "<file>: ...").
ArchitectureTable parse_architecture_table(const std::string& file, const nlohmann::json& doc);
ArchitectureTable read_architecture_table(const std::string& file);

// The folder of the tables shipped with vmerge: share/vmerge/architectures next to the
// running binary (a build tree) or in ../share (an installed prefix); "" when neither exists.
std::string shipped_tables_dir();

// The tables in the order they apply: the built-in ones ("builtin:NAME.json", sorted), each
// replaced by a same-named file in shipped_tables_dir() and then in the folder
// $VMERGE_ARCHITECTURE_TABLES names (their other files added), then `extra_files`
// (--architecture_table).
std::vector<std::string> architecture_table_files(const std::vector<std::string>& extra_files);
// Where tables were looked for, for messages: "built in, DIR, ENVDIR ($VMERGE_ARCHITECTURE_TABLES)".
std::string table_folders_text();
// One table file's text (a built-in one from the binary) (read_small_file, so through read_once: rank 0 reads, the others replay).
std::string read_architecture_table_text(const std::string& file);

// The tables of one merge: loaded once (load_architecture_tables) and shared by every stage
// that names, checks or keeps tensors by them.
using ArchitectureTables = std::vector<ArchitectureTable>;

// The tables of architecture_table_files in order; a later table replaces an earlier one for
// each (source, architecture) it lists.
ArchitectureTables load_architecture_tables(const std::vector<std::string>& extra_files);

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
    std::string rest;    // what a final {*} matched ("" when none)
};
std::optional<TableMatch> match_table_rule(const ArchitectureTable& table, const std::string& key);
// Matches `key` against one rule pattern whose {i}/{e} stand for decimal numbers and a final {*}
// for the rest of the name (not empty); fills them in `m`. Every table's rules match by it.
bool match_pattern(const std::string& pattern, const std::string& key, TableMatch& m);

// `pattern` with {i}, {e} and {*} replaced.
std::string fill_table_pattern(const std::string& pattern, const std::string& layer, const std::string& expert,
                               const std::string& rest = "");

// True when HF `name` matches one of the table's keep_fp32 patterns.
bool table_keeps_fp32(const ArchitectureTable& table, const std::string& name);

const char* table_transform_name(TableTransform t);
const char* name_split_name(NameSplit s);
const char* tp_rule_name(TpRule r);

}  // namespace vmerge
