#include "formats/table_mapping.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "core/box_region.h"
#include "architecture/config_check.h"
#include "core/error.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/peft_wrapping.h"
#include "architecture/hf_architecture.h"
#include "architecture/hf_tensor_order.h"

namespace vmerge {
namespace {

OutputTensor renamed(const OutputTensor& from, const std::string& name) {
    OutputTensor t;
    t.name = name;
    t.source_dtype = t.dtype = from.source_dtype;
    t.shape = from.shape;
    t.copies = from.copies;
    return t;
}

// The head count a rope_permute rule names: the first of its '|'-separated config.json keys
// that is present (num_key_value_heads falls back to num_attention_heads).
int64_t rule_heads(const TableRule& rule, const ArchitectureTable& table, const HfConfig& config) {
    const auto keys = split_names(rule.heads);
    for (const auto& key : keys)
        if (auto it = config.json.find(key); it != config.json.end() && !it->is_null()) return config_int(config, key);
    throw Error(config.dir + "/config.json: no " + rule.heads + " (" + table.file + " rule " + std::to_string(rule.index) +
                " needs it for its RoPE permutation)");
}

// The layer number `to` takes: the matched one, moved by the rule's layer_offset when it has
// one (torchtitan's mtp_layers.{k} is HF layer num_hidden_layers + k).
std::string output_layer(const TableMatch& match, const ArchitectureTable& table, const HfConfig& config) {
    const TableRule& rule = *match.rule;
    if (!rule.layer_offset) return match.layer;
    int64_t layer = 0;
    const char* end = match.layer.data() + match.layer.size();
    const auto [ptr, ec] = std::from_chars(match.layer.data(), end, layer);
    if (ec != std::errc() || ptr != end || layer > (int64_t{1} << 40))
        throw Error(table.file + ": rule " + std::to_string(rule.index) + ": layer number " + match.layer + " is too large");
    const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
    return std::to_string(layer + evaluate_int(*rule.layer_offset, scope));
}

nlohmann::ordered_json rule_json(const TableRule& rule, size_t tensors) {
    nlohmann::ordered_json j{{"rule", rule.index}, {"from", rule.from}};
    if (rule.drop.empty()) j["to"] = rule.to;
    else j["drop"] = rule.drop;
    if (rule.transform != TableTransform::None) j["transform"] = table_transform_name(rule.transform);
    if (!rule.heads.empty()) j["heads"] = rule.heads;
    if (rule.layer_offset) j["layer_offset"] = rule.layer_offset->text();
    if (rule.tied_head) j["tied_head"] = true;
    j["tensors"] = tensors;
    return j;
}

}  // namespace

OutputTensor rope_permuted(const OutputTensor& assembled, int64_t heads, const std::string& name) {
    const int64_t rows = assembled.shape.empty() ? 0 : assembled.shape[0];
    if (heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0)
        throw Error(assembled.name + ": " + shape_to_string(assembled.shape) + " rows are not " + std::to_string(heads) +
                    " heads of an even head dim (RoPE permutation)");
    const int64_t d = rows / heads, half = d / 2;
    OutputTensor out = renamed(assembled, name);
    out.copies.clear();
    Shape start(assembled.shape.size(), 0), extent = assembled.shape, dst(assembled.shape.size(), 0);
    extent[0] = 1;
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t j = 0; j < 2; ++j)
            for (int64_t p = 0; p < half; ++p) {
                start[0] = h * d + 2 * p + j;
                dst[0] = h * d + j * half + p;
                extract_region(assembled, start, extent, dst, out.copies);
            }
    return out;
}

std::vector<OutputTensor> split_experts(const OutputTensor& grouped, const std::string& name_pattern,
                                        const std::string& layer, std::vector<TensorRef>& sources) {
    if (grouped.shape.size() < 2)
        throw Error(grouped.name + ": " + shape_to_string(grouped.shape) + " has no expert axis to split");
    const int64_t experts = grouped.shape[0];
    std::vector<OutputTensor> out;
    for (int64_t e = 0; e < experts; ++e) {
        OutputTensor t;
        t.name = fill_table_pattern(name_pattern, layer, std::to_string(e));
        t.source_dtype = t.dtype = grouped.source_dtype;
        t.shape.assign(grouped.shape.begin() + 1, grouped.shape.end());
        out.push_back(std::move(t));
    }
    for (const BoxCopy& c : grouped.copies)
        for (int64_t k = 0; k < c.extent[0]; ++k) {
            const TensorRef view = select_dim(sources[c.source], 0, c.src_start[0] + k);
            const uint32_t source = static_cast<uint32_t>(sources.size());
            sources.push_back(view);
            add_copy(out[static_cast<size_t>(c.dst_start[0] + k)], source, Shape(c.src_start.begin() + 1, c.src_start.end()),
                     Shape(c.dst_start.begin() + 1, c.dst_start.end()), Shape(c.extent.begin() + 1, c.extent.end()));
        }
    return out;
}

// Copy `c`'s source as a view of its own, its shape and strides rewritten by `reshape`, appended to
// `sources`: the view's index. A flat buffer's copies index it as its own 1-D tensor, which has
// no such view: an Error saying what then `cannot` be done.
template <typename Reshape>
uint32_t add_source_view(const OutputTensor& assembled, const BoxCopy& c, std::vector<TensorRef>& sources,
                         const char* cannot, Reshape reshape) {
    TensorRef view = sources[c.source];
    if (view.shape.size() != assembled.shape.size())
        throw Error(assembled.name + ": stored as " + shape_to_string(view.shape) + ", not as " +
                    std::to_string(assembled.shape.size()) + "-axis pieces, so " + cannot);
    reshape(view);
    view.dtensor.reset();
    sources.push_back(std::move(view));
    return static_cast<uint32_t>(sources.size() - 1);
}

OutputTensor transposed(const OutputTensor& assembled, const std::string& name, std::vector<TensorRef>& sources) {
    const size_t rank = assembled.shape.size();
    if (rank < 2) throw Error(assembled.name + ": " + shape_to_string(assembled.shape) + " has no two axes to transpose");
    auto swap_last = [rank](Shape s) {
        std::swap(s[rank - 2], s[rank - 1]);
        return s;
    };
    OutputTensor out = renamed(assembled, name);
    out.shape = swap_last(assembled.shape);
    out.copies.clear();
    for (const BoxCopy& c : assembled.copies) {
        const uint32_t source = add_source_view(assembled, c, sources, "it cannot be read transposed", [&](TensorRef& view) {
            view.shape = swap_last(view.shape);
            view.stride = swap_last(view.stride);
        });
        add_copy(out, source, swap_last(c.src_start), swap_last(c.dst_start), swap_last(c.extent));
    }
    return out;
}

OutputTensor gate_up_interleaved(const OutputTensor& assembled, const std::string& name, std::vector<TensorRef>& sources) {
    const size_t rank = assembled.shape.size();
    if (rank == 0 || assembled.shape.back() % 2 != 0 || !assembled.copies_view.empty() ||
        !assembled.packed_codes_shape.empty() || assembled.lora_delta || assembled.value_offset != 0)
        throw Error(assembled.name + ": " + shape_to_string(assembled.shape) +
                    " is not a plain tensor whose last axis holds [gate | up] halves to interleave");
    const int64_t half = assembled.shape.back() / 2;
    OutputTensor out = renamed(assembled, name);
    out.zero_fill = assembled.zero_fill;
    out.copies_view = assembled.shape;
    out.copies_view.back() = half;
    out.copies_view.push_back(2);  // [.., F, 2]: element (j, k) is column 2j + k
    out.copies.clear();
    for (const BoxCopy& c : assembled.copies) {
        const uint32_t source = add_source_view(assembled, c, sources, "its halves cannot be interleaved", [](TensorRef& view) {
            view.shape.push_back(1);  // a unit axis for the half index k
            view.stride.push_back(1);
        });
        // One copy per half the piece's columns touch (a whole fc1 holds both).
        const int64_t first = c.dst_start.back(), end = first + c.extent.back();
        for (int64_t k = 0; k < 2; ++k) {
            const int64_t lo = std::max(first, k * half), hi = std::min(end, (k + 1) * half);
            if (lo >= hi) continue;
            Shape src = c.src_start, dst = c.dst_start, extent = c.extent;
            src.back() += lo - first;
            src.push_back(0);
            dst.back() = lo - k * half;
            dst.push_back(k);
            extent.back() = hi - lo;
            extent.push_back(1);
            add_copy(out, source, std::move(src), std::move(dst), std::move(extent));
        }
    }
    return out;
}

OutputTensor fused_expert_transformed(const OutputTensor& fused, TableTransform transform, std::vector<TensorRef>& sources) {
    switch (transform) {
        case TableTransform::Transpose: return transposed(fused, fused.name, sources);
        case TableTransform::InterleaveGateUp: return gate_up_interleaved(fused, fused.name, sources);
        case TableTransform::TransposeInterleaveGateUp:
            return gate_up_interleaved(transposed(fused, fused.name, sources), fused.name, sources);
        default: return fused;
    }
}

std::vector<OutputTensor> split_experts_gate_up(const OutputTensor& grouped, const std::string& names,
                                               const std::string& layer, std::vector<TensorRef>& sources) {
    const std::vector<std::string> patterns = split_names(names);
    if (grouped.shape.size() < 3 || grouped.shape[1] % 2 != 0 || patterns.size() != 2)
        throw Error(grouped.name + ": " + shape_to_string(grouped.shape) +
                    " is not [experts, 2 x rows, ...] of fused gate and up projections");
    std::vector<OutputTensor> out;
    const std::vector<OutputTensor> experts = split_experts(grouped, "{e}", layer, sources);
    for (size_t e = 0; e < experts.size(); ++e) {
        const int64_t half = experts[e].shape[0] / 2;
        for (int64_t part = 0; part < 2; ++part) {
            OutputTensor t;
            t.name = fill_table_pattern(patterns[static_cast<size_t>(part)], layer, std::to_string(e));
            t.source_dtype = t.dtype = grouped.source_dtype;
            t.shape = experts[e].shape;
            t.shape[0] = half;
            Shape start(t.shape.size(), 0);
            start[0] = part * half;
            extract_region(experts[e], start, t.shape, Shape(t.shape.size(), 0), t.copies);
            out.push_back(std::move(t));
        }
    }
    return out;
}

namespace {

// The tensors one rule makes of `t`.
std::vector<OutputTensor> apply_rule(const OutputTensor& t, const TableMatch& match, const ArchitectureTable& table,
                                     const HfConfig& config, std::vector<TensorRef>& sources) {
    const TableRule& rule = *match.rule;
    const std::string layer = output_layer(match, table, config);
    const std::string name = fill_table_pattern(rule.to, layer, match.expert, match.rest);
    switch (rule.transform) {
        case TableTransform::None: return {renamed(t, name)};
        case TableTransform::RopePermute: return {rope_permuted(t, rule_heads(rule, table, config), name)};
        case TableTransform::SplitExperts:
            return split_experts(t, fill_table_pattern(rule.to, layer, "{e}", match.rest), layer, sources);
        case TableTransform::SplitExpertsGateUp:
            return split_experts_gate_up(t, fill_table_pattern(rule.to, layer, "{e}", match.rest), layer, sources);
        case TableTransform::Transpose: return {transposed(t, name, sources)};
        case TableTransform::InterleaveGateUp:
        case TableTransform::TransposeInterleaveGateUp:
            return {fused_expert_transformed(renamed(t, name), rule.transform, sources)};
    }
    return {};
}

}  // namespace

TableApplication apply_architecture_table(const TensorMapping& model, const ArchitectureTable& table,
                                          const HfConfig& config, bool allow_unmapped,
                                          std::vector<std::string>& notes, SourceLedger& ledger) {
    TableApplication result;
    TensorMapping& out = result.mapping;
    out.sources = model.sources;
    OutputNames names(table.file);
    std::vector<std::string> unmapped;
    std::map<size_t, size_t> used;  // rule index -> tensors it took
    size_t tied = 0;
    for (const OutputTensor& t : model.tensors) {
        const auto match = match_table_rule(table, t.name);
        if (!match) {
            unmapped.push_back(t.name);
            ledger.drop_output(t, out.sources, DropReason::Unmapped);
            continue;
        }
        const TableRule& rule = *match->rule;
        ++used[rule.index];
        if (!rule.drop.empty() || (rule.tied_head && config.tie_word_embeddings)) {
            ledger.drop_output(t, out.sources, rule.drop.empty() ? DropReason::TiedHead : DropReason::TableDrop);
            tied += rule.drop.empty();
            continue;
        }
        std::vector<OutputTensor> made = apply_rule(t, *match, table, config, out.sources);
        for (auto& o : made) {
            names.claim(o.name, t.name);
            check_copies_tile_output(o, out.sources);
            out.tensors.push_back(std::move(o));
        }
    }
    if (tied) notes.push_back("tied word embeddings: the checkpoint's output layer is not written");
    if (!unmapped.empty()) {
        if (!allow_unmapped)
            throw Error(table.file + ": no rule for these checkpoint tensors (pass --allow_unmapped to drop them): " +
                        list_names(unmapped));
        std::string all;
        for (const auto& n : unmapped) all += (all.empty() ? "" : ", ") + n;
        notes.push_back("dropped " + std::to_string(unmapped.size()) + " unmapped tensors (--allow_unmapped): " + all);
    }
    std::stable_sort(out.tensors.begin(), out.tensors.end(),
                     [](const OutputTensor& a, const OutputTensor& b) { return hf_tensor_less(a.name, b.name); });
    nlohmann::ordered_json rules = nlohmann::ordered_json::array();
    for (const TableRule& rule : table.rules)
        if (auto it = used.find(rule.index); it != used.end()) rules.push_back(rule_json(rule, it->second));
    result.applied = {{"name", table.name}, {"file", table.file}, {"source", table.source}, {"rules_applied", rules}};
    return result;
}

namespace {

// `t` (its model name matched by a rename-only rule) under the name the rule gives, inside the
// PEFT wrapping it had; the module's run-time path is recorded for the adapter's names.
void rename_as_saved(OutputTensor& t, const PeftWrapping& peft, const std::string& renamed, const TableRule& rule,
                     const ArchitectureTable& table, TensorMapping& mapping) {
    const std::optional<std::string> name = peft.rewrapped(renamed);
    if (!name)
        throw Error(table.file + ": rule " + std::to_string(rule.index) + " (from '" + rule.from + "') renames " +
                    peft.model_name() + " to " + renamed + ", changing its parameter name, which the PEFT wrapping of " +
                    t.name + " cannot follow");
    const std::string parameter = peft.parameter();
    if (peft.peft() && renamed.ends_with(parameter)) {
        const std::string module = renamed.substr(0, renamed.size() - parameter.size());
        if (module != peft.module()) mapping.peft_run_time_modules.emplace(module, peft.module());
    }
    t.name = *name;
}

}  // namespace

void apply_saved_names(TensorMapping& mapping, const ArchitectureTable& table, const HfConfig& config,
                       SourceLedger& ledger, std::vector<std::string>& notes) {
    std::vector<OutputTensor> kept;
    OutputNames names(table.file);
    size_t renamed_count = 0;
    for (OutputTensor& t : mapping.tensors) {
        // A PEFT-wrapped name is matched by the name of the model tensor it stands for.
        const PeftWrapping peft = peft_wrapping(t.name);
        const auto match = t.adapter ? std::nullopt : match_table_rule(table, peft.model_name());
        if (!match) {
            if (!t.adapter) names.claim(t.name, t.name);
            kept.push_back(std::move(t));
            continue;
        }
        const TableRule& rule = *match->rule;
        ++renamed_count;
        if (!rule.drop.empty() || (rule.tied_head && config.tie_word_embeddings)) {
            ledger.drop_output(t, mapping.sources, rule.drop.empty() ? DropReason::TiedHead : DropReason::TableDrop);
            continue;
        }
        if (rule.transform == TableTransform::None) {  // every field kept: a LoRA delta follows its weight
            const std::string from = t.name;
            rename_as_saved(t, peft, fill_table_pattern(rule.to, output_layer(*match, table, config), match->expert, match->rest),
                            rule, table, mapping);
            names.claim(t.name, from);
            kept.push_back(std::move(t));
            continue;
        }
        if (t.lora_delta || t.source_scales || t.role != OutputTensor::Role::Plain || t.zero_fill ||
            t.value_offset != 0 || peft.wrapped())
            throw Error(table.file + ": rule " + std::to_string(rule.index) + " (from '" + rule.from + "'): " + t.name +
                        " carries a LoRA adapter or delta or is quantized or padded, and cannot be regrouped");
        for (OutputTensor& o : apply_rule(t, *match, table, config, mapping.sources)) {
            o.name = peft.prefix + o.name;  // an unwrapped tensor of a PEFT state dict keeps PEFT's prefix
            o.keep_float32 = t.keep_float32;
            names.claim(o.name, t.name);
            check_copies_tile_output(o, mapping.sources);
            kept.push_back(std::move(o));
        }
    }
    mapping.tensors = std::move(kept);
    if (renamed_count)
        notes.push_back(std::to_string(renamed_count) + " tensors renamed from transformers' run-time names to those its "
                        "save_pretrained writes (" + table.file + ")");
}

void check_table_output(const TensorMapping& mapping, const ArchitectureTable& table, const HfConfig& config,
                        const ArchitectureTables& tables, std::vector<std::string>& notes) {
    if (table.config_check.empty()) {
        notes.push_back("the merged tensors are not checked against " + config.dir + "/config.json: " + table.file +
                        " names no config_check architecture");
        return;
    }
    const auto expected = expected_tensors_for(config, tables, table.config_check, false, true);
    if (!expected)
        throw Error(table.file + ": config_check '" + table.config_check + "' is not an architecture with a tensor_set "
                    "(an 'hf' table's)");
    check_against_config(mapping, config, table.config_check, *expected, false);
}

}  // namespace vmerge
