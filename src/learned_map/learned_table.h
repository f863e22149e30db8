#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "learned_map/layer_numbers.h"
#include "learned_map/tensor_matching.h"

namespace vmerge {

// `name` with its first all-digit part written {i} (the layer) and its second {e} (the expert);
// further numbers stay as they are (every number read as a layer or expert number; map reads a
// side's names through LayerNumbers, layer_numbers.h).
std::string numbered_pattern(const std::string& name);

// One rule of the learned table, with the evidence of every tensor it took.
struct LearnedRule {
    std::string from;
    std::vector<std::string> to;  // empty for a drop rule
    RowLayout layout = RowLayout::Same;
    std::string heads_key;        // RopePermute, QkvPerHead: the config.json key of the head count
    bool tied_head = false;
    // torchtitan's grouped experts [E, ...]: matched expert by expert (checkpoint_expert_views),
    // stated as one rule with transform split_experts.
    bool split_experts = false;
    // The grouped tensor whole, its last two axes swapped (transform "transpose").
    bool transposed = false;
    // Per-expert tensors stacked into the base's [E, ...] tensor (stacked_experts.h): the
    // stack_experts expression of the expert count; "" : none.
    std::string stack_experts;
    // The HF layer number minus the checkpoint's (torchtitan's MTP layers: num_hidden_layers),
    // stated as layer_offset "num_hidden_layers"; 0: the same numbers.
    int64_t layer_offset = 0;
    // How a legacy Megatron save's tensor-parallel pieces join (the table's tp name of the
    // assembly the values chose); "" or "replicated": nothing to state (the default).
    std::string tp;
    std::string drop;             // why it has no HF name
    size_t tensors = 0;
    double worst_distance = 0;                // the largest distance of a match it took
    double worst_cosine = 1;                  // the smallest cosine
    std::optional<double> closest_runner_up;  // the smallest distance of a runner-up
    std::string example;                      // the first checkpoint tensor it took
};

// The rules learned from the matches, in the checkpoint's order, generalised over layers and
// experts; `refusals` says why a table cannot be proposed ("" none: the table is complete).
struct LearnedTable {
    std::vector<LearnedRule> rules;
    std::vector<std::string> refusals;
    std::vector<std::string> unmapped_base;  // base tensors nothing maps to
    LayerNumbers source_numbers;             // how the checkpoint's names number layers
};

// Generalises the matches into rules: one per checkpoint name pattern; two tensors of one
// pattern that map differently (another target pattern or layout) are a refusal naming both.
LearnedTable learn_table(const MatchResult& matches, const std::vector<NamedShape>& source,
                         const std::vector<NamedShape>& base);

// A drop rule for checkpoint tensor `name` that map did not compare (`reason`: why it has no HF
// name), unless a rule of its pattern is there already.
void add_drop_rule(LearnedTable& table, const std::string& name, const std::string& reason);

// The names of the expert views of a grouped checkpoint tensor: `grouped` + ".{e}" ({e}: the
// expert), so that a view's numbers (layer, expert) meet the base's per-expert tensors.
std::string expert_view_pattern(const std::string& grouped);

// The rules learned from expert views (`views`: their names) restated for the grouped tensors:
// `from` without the view's ".{e}", transform split_experts. A grouped tensor whose experts
// disagree was refused already (one pattern, two rules).
void join_expert_views(LearnedTable& table, const std::vector<std::string>& views);

// A grouped torchtitan tensor offered two ways: expert by expert (`views`, the decisions of its
// expert views: split_experts) and whole with its last two axes swapped (`transposed`, the
// decision of that tensor). A match among the views keeps them, else a match of the transposed
// tensor keeps it, else the views stay (their drop or refusal); the other form's decisions
// become other_assembly.
void settle_expert_forms(MatchResult& matches, size_t transposed, const std::vector<size_t>& views);

// What the learned table is for: written into its JSON.
struct TableIdentity {
    std::string name;
    TableSource source = TableSource::Megatron;
    std::string architecture;  // config.json's architectures[0]
    std::string config_check;  // "" : none
    std::string notes;
};

// The table as `--architecture_table` reads it (docs/architecture-tables.md).
nlohmann::ordered_json learned_table_json(const LearnedTable& table, const TableIdentity& identity);

// The proposal with its evidence, one line per rule (distance of the match, the runner-up's),
// then the dropped, the refused and the base tensors nothing maps to.
std::string learned_table_report(const LearnedTable& table);

// The same as JSON (inspect --suggest_table --json): "rules" (each with from, to or drop,
// layout, tp, tensors, worst_distance, worst_cosine, closest_runner_up, example), "refused",
// "unmapped_base".
nlohmann::ordered_json learned_table_evidence_json(const LearnedTable& table);

}  // namespace vmerge
