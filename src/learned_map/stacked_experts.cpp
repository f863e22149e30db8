#include "learned_map/stacked_experts.h"

#include <algorithm>
#include <set>

namespace vmerge {

bool is_stacked_experts(const Shape& shape, int64_t experts) {
    return experts > 0 && shape.size() >= 3 && shape[0] == experts;
}

std::string stacked_view_name(const std::string& stacked, int64_t expert) {
    return stacked + "." + std::to_string(expert);
}

void join_stacked_views(LearnedTable& table, const std::vector<NamedShape>& base, const std::vector<std::string>& views) {
    if (views.empty()) return;
    // The views' patterns as learn_table wrote the rules' `to` (through the base's LayerNumbers).
    const LayerNumbers base_numbers(names_of(base));
    std::set<std::string> view_patterns;
    for (const auto& v : views) view_patterns.insert(base_numbers.pattern(v));
    std::vector<LearnedRule> kept;
    for (LearnedRule& r : table.rules) {
        const auto is_view = [&](const std::string& to) { return view_patterns.count(to) > 0; };
        if (!std::any_of(r.to.begin(), r.to.end(), is_view)) {
            kept.push_back(std::move(r));
            continue;
        }
        if (r.to.size() != 1 || r.layout != RowLayout::Same || r.transposed || r.split_experts) {
            table.refusals.push_back(r.example + " -> " + r.to[0] + ": a stacked expert tensor's slice taken as part of a " +
                                     layout_name(r.layout) +
                                     " tensor; stack_experts stacks whole per-expert tensors only");
            continue;
        }
        if (r.from.find("{e}") == std::string::npos || !r.to[0].ends_with(".{e}")) {
            table.refusals.push_back(r.example + " -> " + r.to[0] +
                                     ": one slice of stacked experts matched by a tensor without an expert number; "
                                     "stack_experts needs one checkpoint tensor per expert");
            continue;
        }
        r.to[0].resize(r.to[0].size() - 4);
        r.stack_experts = kStackedExpertCount;
        kept.push_back(std::move(r));
    }
    table.rules = std::move(kept);
    report_unmapped_once(table, views);
}

void report_unmapped_once(LearnedTable& table, const std::vector<std::string>& views) {
    // A stacked tensor nothing maps to left one unmapped view per expert: named once instead, with
    // how many of its slices were left.
    const std::set<std::string> view_names(views.begin(), views.end());
    std::vector<std::string> names;
    std::vector<size_t> slices;  // per entry of `names`: the unmapped slices (0: not a stacked tensor)
    for (const std::string& name : table.unmapped_base) {
        if (!view_names.count(name)) {
            names.push_back(name);
            slices.push_back(0);
            continue;
        }
        const std::string stacked = name.substr(0, name.rfind('.'));
        const auto at = std::find(names.begin(), names.end(), stacked);
        if (at == names.end()) {
            names.push_back(stacked);
            slices.push_back(1);
        } else {
            ++slices[at - names.begin()];
        }
    }
    table.unmapped_base.clear();
    for (size_t i = 0; i < names.size(); ++i)
        table.unmapped_base.push_back(slices[i] == 0 ? names[i]
                                                     : names[i] + " (stacked experts: " + std::to_string(slices[i]) +
                                                           (slices[i] == 1 ? " slice)" : " slices)"));
}

}  // namespace vmerge
