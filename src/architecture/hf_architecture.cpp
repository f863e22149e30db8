#include "architecture/hf_architecture.h"

#include <algorithm>

#include "architecture/config_expression.h"
#include "core/error.h"
#include "core/text_pattern.h"

namespace vmerge {

std::optional<std::string> canonical_mtp_key(const std::string& key, int64_t layers, int64_t& depth) {
    static const TextPattern inner(R"(mtp\.layers\.(\d{1,6})\.(?:transformer_layer|mtp_model_layer)\.(.*))");
    static const TextPattern own(R"(mtp\.layers\.(\d{1,6})\.(enorm|hnorm|eh_proj|final_layernorm)\.(.*))");
    TextMatch m;
    const bool is_inner = inner.full_match(key, m);
    if (!is_inner && !own.full_match(key, m)) return std::nullopt;
    depth = std::stoll(m[1]);
    const std::string layer = "decoder.layers." + std::to_string(layers + depth) + ".";
    return is_inner ? layer + std::string(m[2]) : layer + "mtp." + std::string(m[2]) + "." + std::string(m[3]);
}

SectionRowsSum section_rows_sum(const std::vector<int64_t>& rows) {
    SectionRowsSum sum;
    for (const int64_t r : rows) {
        sum.total += r;
        sum.text += (sum.text.empty() ? "" : " + ") + std::to_string(r);
    }
    return sum;
}

std::optional<std::string> mtp_rule_key(const ArchitectureInfo& arch, const std::string& key, int64_t& depth) {
    if (arch.mtp_own_names) return std::nullopt;
    return canonical_mtp_key(key, arch.layers, depth);
}

std::string_view megatron_submodel_prefix(std::string_view key) {
    for (std::string_view prefix : {"language_model.", "vision_model."})
        if (key.starts_with(prefix)) return key.substr(0, prefix.size());
    return {};
}

namespace {

// The source 'megatron' table for `architecture` (nullptr when none).
const ArchitectureTable* megatron_table(const std::vector<ArchitectureTable>& tables, const std::string& architecture) {
    return find_architecture_table(tables, "megatron", architecture);
}

}  // namespace

std::optional<TensorSet> tensor_set_for(const ArchitectureTables& tables, const std::string& architecture) {
    std::vector<const TensorSet*> chain;  // the architecture's set first, then what it extends
    std::string name = architecture;
    for (;;) {
        const ArchitectureTable* hf = find_architecture_table(tables, "hf", name);
        if (!hf || !hf->tensor_set) {
            if (chain.empty()) return std::nullopt;
            throw Error(chain.back()->file + ": tensor_set extends '" + name + "', which no 'hf' table gives a tensor_set");
        }
        for (const TensorSet* seen : chain)
            if (seen == &*hf->tensor_set) throw Error(hf->file + ": tensor_set extends itself through '" + name + "'");
        chain.push_back(&*hf->tensor_set);
        if (hf->tensor_set->extends.empty()) break;
        name = hf->tensor_set->extends;
    }
    TensorSet set = *chain.back();
    for (size_t k = chain.size() - 1; k-- > 0;) set = extend_tensor_set(set, *chain[k]);
    return set;
}

std::optional<ExpectedTensors> expected_tensors_for(const HfConfig& config, const ArchitectureTables& tables,
                                                    const std::string& architecture, bool value_model, bool with_mtp) {
    const std::optional<TensorSet> set = tensor_set_for(tables, architecture);
    if (!set) return std::nullopt;
    TensorSetInputs inputs;
    inputs.value_model = value_model || architecture.ends_with("ForTokenClassification");
    inputs.mtp_layers = with_mtp ? config_int(config, "num_nextn_predict_layers", 0) : 0;
    const ArchitectureTable* hf = find_architecture_table(tables, "hf", architecture);
    inputs.mtp_shared_copies = hf && hf->mtp_shared_copies;
    return expand_tensor_set(*set, config, inputs);
}

bool has_tensor_table(const HfConfig& config, const ArchitectureTables& tables) {
    return !config.architectures.empty() && tensor_set_for(tables, config.architectures[0]).has_value();
}

namespace {

// Each rule's section row counts (TableRule::section_rows) from config.json.
void settle_section_rows(std::vector<TableRule>& rules, const HfConfig& config) {
    const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
    for (TableRule& rule : rules) {
        rule.section_rows.clear();
        for (const TableSection& s : rule.sections) {
            const int64_t rows = evaluate_int(s.rows, scope);
            if (rows <= 0)
                throw Error(config.dir + "/config.json: rule " + std::to_string(rule.index) + " (from '" + rule.from +
                            "'): section rows '" + s.rows.text() + "' = " + std::to_string(rows) + ", expected a positive count");
            rule.section_rows.push_back(rows);
        }
    }
}

}  // namespace

ArchitectureInfo architecture_for(const HfConfig& config, bool value_model, bool drop_mtp,
                                  const ArchitectureTables& tables) {
    if (config.architectures.empty())
        throw Error(config.dir + "/config.json: no 'architectures'; cannot choose a name table");
    ArchitectureInfo arch;
    arch.name = config.architectures[0];
    const ArchitectureTable* table = megatron_table(tables, arch.name);
    if (!table) {
        throw Error(config.dir + "/config.json: unknown architecture " + arch.name +
                    "; supported: " + table_architectures(tables, "megatron") + " (the megatron tables: " +
                    table_folders_text() + "); pass --architecture_table FILE for another");
    }
    arch.table_file = table->file;
    arch.table_name = table->name;
    arch.mtp_own_names = table->mtp_own_names;
    const std::string checked_as = table->config_check.empty() ? arch.name : table->config_check;
    const std::optional<TensorSet> set = tensor_set_for(tables, checked_as);
    if (!set && !table->config_check.empty())
        throw Error(table->file + ": config_check '" + table->config_check + "' is not an architecture with a tensor_set "
                    "(an 'hf' table's)");
    arch.value_model = value_model || arch.name.ends_with("ForTokenClassification");
    arch.hidden = text_config_int(config, "hidden_size");
    arch.heads = text_config_int(config, "num_attention_heads");
    arch.kv_heads = text_config_int(config, "num_key_value_heads", arch.heads);
    arch.head_dim = text_config_int(config, "head_dim", arch.heads ? arch.hidden / arch.heads : 0);
    arch.vocab = text_config_int(config, "vocab_size");
    arch.layers = text_config_int(config, "num_hidden_layers");
    arch.drop_mtp = drop_mtp;
    arch.mtp_layers = drop_mtp ? 0 : config_int(config, "num_nextn_predict_layers", 0);
    if (const ArchitectureTable* hf = find_architecture_table(tables, "hf", arch.name)) arch.mtp_shared_copies = hf->mtp_shared_copies;
    // A value model's head rules come first: they take output_layer from the causal LM's.
    if (arch.value_model)
        for (const TableRule& r : table->rules)
            if (r.value_head) arch.rules.push_back(r);
    for (const TableRule& r : table->rules)
        if (!r.value_head) arch.rules.push_back(r);
    settle_section_rows(arch.rules, config);
    if (set) {
        arch.tensor_set_file = set->file;
        arch.expected = expand_tensor_set(*set, config, {arch.value_model, arch.mtp_layers, arch.mtp_shared_copies});
    }
    return arch;
}

nlohmann::ordered_json megatron_rules_json(const ArchitectureInfo& arch, const std::map<size_t, size_t>& used) {
    nlohmann::ordered_json rules = nlohmann::ordered_json::array();
    std::vector<const TableRule*> ordered;
    for (const TableRule& rule : arch.rules) ordered.push_back(&rule);
    std::sort(ordered.begin(), ordered.end(), [](const TableRule* a, const TableRule* b) { return a->index < b->index; });
    for (const TableRule* rule : ordered) {
        auto it = used.find(rule->index);
        if (it == used.end()) continue;
        nlohmann::ordered_json j{{"rule", rule->index}, {"from", rule->from}};
        if (rule->drop.empty()) j["to"] = split_names(rule->to);
        else j["drop"] = rule->drop;
        if (rule->split != NameSplit::None) j["split"] = name_split_name(rule->split);
        if (rule->groups) j["groups"] = rule->groups->text();
        if (rule->stack_experts) j["stack_experts"] = rule->stack_experts->text();
        if (!rule->section_rows.empty()) j["section_rows"] = rule->section_rows;
        if (rule->add != 0) j["add"] = rule->add;
        if (rule->transform != TableTransform::None) j["transform"] = table_transform_name(rule->transform);
        j["tp"] = tp_rule_name(rule->tp);
        if (rule->tied_head) j["tied_head"] = true;
        j["tensors"] = it->second;
        rules.push_back(std::move(j));
    }
    return {{"name", arch.table_name}, {"file", arch.table_file}, {"source", "megatron"}, {"rules_applied", rules}};
}

std::string substitute_rule(std::string_view pattern, const std::string& layer, const std::string& expert) {
    std::string out(pattern);
    for (auto [placeholder, value] : {std::pair{std::string("{i}"), layer}, std::pair{std::string("{e}"), expert}})
        for (size_t at; (at = out.find(placeholder)) != std::string::npos;) out.replace(at, placeholder.size(), value);
    return out;
}

std::vector<std::string> split_names(std::string_view names) {
    std::vector<std::string> parts;
    for (size_t start = 0;;) {
        const size_t bar = names.find('|', start);
        parts.emplace_back(names.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start));
        if (bar == std::string_view::npos) return parts;
        start = bar + 1;
    }
}

std::optional<RuleMatch> match_rule(const ArchitectureInfo& arch, const std::string& megatron_key) {
    // megatron-core names an MTP block's inner layer transformer_layer, later mtp_model_layer:
    // a table naming MTP tensors as saved states the first, and reads both.
    std::string key = megatron_key;
    if (const size_t at = key.find(".mtp_model_layer."); arch.mtp_own_names && at != std::string::npos)
        key.replace(at, 17, ".transformer_layer.");
    for (const TableRule& rule : arch.rules) {
        TableMatch m;
        if (!match_pattern(rule.from, key, m)) continue;
        RuleMatch match;
        match.rule = &rule;
        match.hf_names = split_names(fill_table_pattern(rule.to, m.layer, m.expert, m.rest));
        match.expert = m.expert;
        return match;
    }
    return std::nullopt;
}

}  // namespace vmerge
