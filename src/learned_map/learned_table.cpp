#include "learned_map/learned_table.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace vmerge {
namespace {

std::string number_text(double value, int digits = 3) {
    std::ostringstream out;
    out.precision(digits);
    out << value;
    return out.str();
}

// The rule one decision gives (before its evidence is added).
LearnedRule rule_of(const SourceDecision& d, const std::vector<NamedShape>& source, const std::vector<NamedShape>& base,
                    const LayerNumbers& source_numbers, const LayerNumbers& base_numbers) {
    LearnedRule rule;
    rule.from = source_numbers.pattern(source[d.source].name);
    rule.example = source[d.source].name;
    if (d.tied_head) {
        rule.to = {"lm_head.weight"};
        rule.tied_head = true;
        if (d.match) {  // a copy of the embedding: laid out and joined as the embedding is
            rule.layout = d.match->guess.layout;
            rule.tp = source[d.source].tp;
        }
    } else if (d.match) {
        rule.layout = d.match->guess.layout;
        rule.heads_key = d.match->guess.heads_key;
        for (size_t b : d.match->guess.parts) rule.to.push_back(base_numbers.pattern(base[b].name));
        rule.tp = source[d.source].tp;
        rule.transposed = source[d.source].transposed;
        // Only candidate_groups' offset gets here: the base layer num_hidden_layers further.
        const auto from_numbers = source_numbers.numbers(source[d.source].name);
        const auto to_numbers = base_numbers.numbers(base[d.match->guess.parts[0]].name);
        if (!from_numbers.empty() && !to_numbers.empty() && from_numbers[0] != to_numbers[0])
            rule.layer_offset = std::stoll(to_numbers[0]) - std::stoll(from_numbers[0]);
    } else {
        rule.drop = d.dropped;
    }
    return rule;
}

bool same_rule(const LearnedRule& a, const LearnedRule& b) {
    // A drop's reason names the closest tensor, which differs per layer: the kind is what counts.
    const bool a_drop = !a.drop.empty(), b_drop = !b.drop.empty();
    return a.to == b.to && a.layout == b.layout && a.heads_key == b.heads_key && a.tied_head == b.tied_head &&
           a.layer_offset == b.layer_offset && a.tp == b.tp && a.transposed == b.transposed && a_drop == b_drop;
}

std::string rule_text(const LearnedRule& r) {
    if (!r.drop.empty()) return "dropped (" + r.drop + ")";
    std::string text;
    for (const auto& t : r.to) text += (text.empty() ? "" : " | ") + t;
    if (r.tied_head) return text + " (tied head)";
    if (r.layout == RowLayout::QkvPerHead) text += " [" + std::string(layout_name(r.layout)) + " of " + r.heads_key + "]";
    else if (r.layout != RowLayout::Same) text += " [" + std::string(layout_name(r.layout)) + "]";
    if (r.split_experts) text += " [split_experts]";
    if (r.transposed) text += " [transpose]";
    if (!r.stack_experts.empty()) text += " [stack_experts]";
    if (!r.tp.empty() && r.tp != "replicated") text += " [tp " + r.tp + "]";
    if (r.layer_offset != 0) text += " [layer + num_hidden_layers]";
    return text;
}

void add_evidence(LearnedRule& rule, const SourceDecision& d) {
    ++rule.tensors;
    if (!d.match) return;
    rule.worst_distance = std::max(rule.worst_distance, d.match->distance);
    rule.worst_cosine = std::min(rule.worst_cosine, d.match->cosine);
    if (d.runner_up && (!rule.closest_runner_up || d.runner_up->distance < *rule.closest_runner_up))
        rule.closest_runner_up = d.runner_up->distance;
}

}  // namespace

std::string numbered_pattern(const std::string& name) { return LayerNumbers().pattern(name); }

LearnedTable learn_table(const MatchResult& matches, const std::vector<NamedShape>& source,
                         const std::vector<NamedShape>& base) {
    LearnedTable table;
    table.source_numbers = LayerNumbers(names_of(source));
    const LayerNumbers base_numbers(names_of(base));
    std::map<std::string, size_t> by_from;  // pattern -> rule index
    for (const SourceDecision& d : matches.decisions) {
        if (d.other_assembly) continue;
        if (!d.refused.empty()) {
            // Two tensors refused for sharing one base tensor carry the same message: once.
            if (std::find(table.refusals.begin(), table.refusals.end(), d.refused) == table.refusals.end())
                table.refusals.push_back(d.refused);
            continue;
        }
        LearnedRule rule = rule_of(d, source, base, table.source_numbers, base_numbers);
        auto [it, fresh] = by_from.try_emplace(rule.from, table.rules.size());
        if (fresh) {
            table.rules.push_back(rule);
        } else if (!same_rule(table.rules[it->second], rule)) {
            const LearnedRule& first = table.rules[it->second];
            table.refusals.push_back("pattern " + rule.from + ": " + first.example + " -> " + rule_text(first) + " but " +
                                     rule.example + " -> " + rule_text(rule) + ": one rule cannot take both");
            continue;
        }
        add_evidence(table.rules[it->second], d);
    }
    for (size_t b : matches.unmapped_base) table.unmapped_base.push_back(base[b].name);
    return table;
}

void add_drop_rule(LearnedTable& table, const std::string& name, const std::string& reason) {
    const std::string from = table.source_numbers.pattern(name);
    for (LearnedRule& r : table.rules)
        if (r.from == from) {
            ++r.tensors;
            return;
        }
    LearnedRule rule;
    rule.from = from;
    rule.drop = reason;
    rule.tensors = 1;
    rule.example = name;
    table.rules.push_back(std::move(rule));
}

std::string expert_view_pattern(const std::string& grouped) { return grouped + ".{e}"; }

void join_expert_views(LearnedTable& table, const std::vector<std::string>& views) {
    for (LearnedRule& r : table.rules) {
        if (std::find(views.begin(), views.end(), r.example) == views.end() || !r.from.ends_with(".{e}")) continue;
        r.from.resize(r.from.size() - 4);
        r.split_experts = r.drop.empty();
    }
}

void settle_expert_forms(MatchResult& matches, size_t transposed, const std::vector<size_t>& views) {
    auto& decisions = matches.decisions;
    const bool views_match =
        std::any_of(views.begin(), views.end(), [&](size_t v) { return decisions[v].match.has_value(); });
    const bool keep_transposed = !views_match && decisions[transposed].match.has_value();
    auto set_aside = [](SourceDecision& d) {
        d.other_assembly = true;
        d.refused.clear();
        d.dropped.clear();
    };
    if (keep_transposed)
        for (size_t v : views) set_aside(decisions[v]);
    else
        set_aside(decisions[transposed]);
}

nlohmann::ordered_json learned_table_json(const LearnedTable& table, const TableIdentity& identity) {
    const bool megatron = identity.source == TableSource::Megatron;
    nlohmann::ordered_json doc;
    doc["vmerge_architecture_table"] = 1;
    doc["name"] = identity.name;
    doc["source"] = megatron ? "megatron" : "torchtitan";
    doc["architectures"] = {identity.architecture};
    if (!identity.config_check.empty()) doc["config_check"] = identity.config_check;
    doc["notes"] = identity.notes;
    nlohmann::ordered_json rules = nlohmann::ordered_json::array();
    for (const LearnedRule& r : table.rules) {
        nlohmann::ordered_json rule;
        rule["from"] = r.from;
        if (!r.drop.empty()) {
            rule["drop"] = r.drop;
        } else if (r.to.size() == 1) {
            rule["to"] = r.to[0];
        } else {
            rule["to"] = r.to;
        }
        if (r.tied_head) rule["tied_head"] = true;
        switch (r.layout) {
            case RowLayout::Same: break;
            case RowLayout::Vocab: rule["split"] = "vocab"; break;
            case RowLayout::Qkv: rule["split"] = "qkv"; break;
            case RowLayout::GateUp: rule["split"] = "gate_up"; break;
            case RowLayout::PlainQkv: break;  // refused by decide: never a rule
            case RowLayout::QkvPerHead:
                rule["split"] = "qkv_per_head";
                rule["groups"] = r.heads_key;
                break;
            case RowLayout::RopePermute:
                rule["transform"] = "rope_permute";
                rule["heads"] = r.heads_key;
                break;
        }
        if (r.split_experts) rule["transform"] = "split_experts";
        if (r.transposed) rule["transform"] = "transpose";
        if (!r.tp.empty() && r.tp != "replicated") rule["tp"] = r.tp;
        if (!r.stack_experts.empty()) rule["stack_experts"] = r.stack_experts;
        if (r.layer_offset != 0) rule["layer_offset"] = "num_hidden_layers";
        rules.push_back(std::move(rule));
    }
    doc["rules"] = std::move(rules);
    return doc;
}

std::string learned_table_report(const LearnedTable& table) {
    std::ostringstream out;
    size_t taken = 0;
    for (const LearnedRule& r : table.rules) taken += r.tensors;
    out << "vmerge map: " << table.rules.size() << " rules for " << taken << " checkpoint tensors\n";
    for (const LearnedRule& r : table.rules) {
        out << "  " << r.from << " -> " << rule_text(r) << "  (" << r.tensors << (r.tensors == 1 ? " tensor" : " tensors");
        if (r.drop.empty() && !r.tied_head) {
            out << "; distance <= " << number_text(r.worst_distance) << ", cosine >= " << number_text(r.worst_cosine, 6)
                << "; runner-up " << (r.closest_runner_up ? ">= " + number_text(*r.closest_runner_up) : "none");
        }
        out << ")\n";
    }
    if (!table.unmapped_base.empty()) {
        out << "base tensors nothing maps to (" << table.unmapped_base.size() << "):";
        for (const auto& n : table.unmapped_base) out << " " << n;
        out << "\n";
    }
    for (const auto& why : table.refusals) out << "refused: " << why << "\n";
    return out.str();
}

nlohmann::ordered_json learned_table_evidence_json(const LearnedTable& table) {
    nlohmann::ordered_json rules = nlohmann::ordered_json::array();
    for (const LearnedRule& r : table.rules) {
        nlohmann::ordered_json rule;
        rule["from"] = r.from;
        if (!r.drop.empty()) rule["drop"] = r.drop;
        else rule["to"] = r.to;
        rule["layout"] = r.tied_head ? "tied head" : layout_name(r.layout);
        if (r.split_experts) rule["split_experts"] = true;
        if (r.transposed) rule["transpose"] = true;
        if (!r.stack_experts.empty()) rule["stack_experts"] = r.stack_experts;
        if (r.layer_offset != 0) rule["layer_offset"] = r.layer_offset;
        if (!r.tp.empty()) rule["tp"] = r.tp;
        rule["tensors"] = r.tensors;
        if (r.drop.empty() && !r.tied_head) {
            rule["worst_distance"] = r.worst_distance;
            rule["worst_cosine"] = r.worst_cosine;
            rule["closest_runner_up"] = r.closest_runner_up ? nlohmann::ordered_json(*r.closest_runner_up) : nullptr;
        }
        rule["example"] = r.example;
        rules.push_back(std::move(rule));
    }
    nlohmann::ordered_json doc;
    doc["rules"] = std::move(rules);
    doc["refused"] = table.refusals;
    doc["unmapped_base"] = table.unmapped_base;
    return doc;
}

}  // namespace vmerge
