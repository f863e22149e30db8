#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_ref.h"
#include "learned_map/learned_table.h"
#include "learned_map/tensor_matching.h"

namespace vmerge {

// transformers 5 saves some MoE families' experts stacked into one tensor [E, ...], expert e at
// index e of the leading axis (Qwen3-VL-MoE's mlp.experts.gate_up_proj [E, 2F, H]), where a
// Megatron checkpoint keeps one tensor per expert. map compares each expert's slice of such a base
// tensor as a base tensor of its own (a "stacked view", named `stacked_view_name`), so that the
// expert's layer and expert numbers meet the checkpoint's per-expert tensors; a rule that takes
// the views becomes one stack_experts rule into the stacked tensor (docs/architecture-tables.md).

// The expert count a learned stack_experts rule reads from config.json: a VL model's text_config
// first, then the top level; Qwen's num_experts, then Mixtral's num_local_experts (the shipped
// tables' expression).
inline constexpr const char* kStackedExpertCount =
    "text_config.num_experts ?? text_config.num_local_experts ?? num_experts ?? num_local_experts";

// A base tensor of `shape` is stacked experts when it has three axes or more and its leading axis
// is the config's expert count (`experts` > 0). A router [E, H] has two: it stays whole.
bool is_stacked_experts(const Shape& shape, int64_t experts);

// Expert `expert`'s slice of stacked tensor `stacked`: `stacked` + "." + the expert, so that the
// view's last number is the expert's.
std::string stacked_view_name(const std::string& stacked, int64_t expert);

// The rules learned from stacked views (`views`: their names among `base`) restated for the
// stacked tensors: `to` without the view's ".{e}", stack_experts kStackedExpertCount. A rule
// whose `from` has no expert number, or that splits one checkpoint tensor over several views,
// cannot be stated (stack_experts takes one tensor per expert, whole): a refusal naming it.
// Then `report_unmapped_once`.
void join_stacked_views(LearnedTable& table, const std::vector<NamedShape>& base, const std::vector<std::string>& views);

// The table's unmapped base tensors with the stacked views among them (`views`) named by their
// stacked tensor, once, with the count of its slices left unmapped.
void report_unmapped_once(LearnedTable& table, const std::vector<std::string>& views);

}  // namespace vmerge
