#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "core/box_region.h"
#include "core/error.h"
#include "architecture/config_check.h"
#include "architecture/config_expression.h"
#include "architecture/hf_tensor_order.h"
#include "formats/megatron/expert_stacking.h"
#include "formats/megatron/megatron_backend.h"

namespace vmerge {
namespace {

OutputTensor new_output(const OutputTensor& from, const std::string& name, Shape shape) {
    OutputTensor t;
    t.name = name;
    t.source_dtype = t.dtype = from.source_dtype;
    t.shape = std::move(shape);
    return t;
}

// Copies rows [row, row+count) of `from` to rows starting at `to_row` of `to`.
void take_rows(const OutputTensor& from, int64_t row, int64_t count, OutputTensor& to, int64_t to_row) {
    Shape start(from.shape.size(), 0), extent = from.shape, dst(from.shape.size(), 0);
    start[0] = row;
    extent[0] = count;
    dst[0] = to_row;
    extract_region(from, start, extent, dst, to.copies);
}

// A vocabulary shard made only of padding rows gives no copy once the rows are trimmed to
// vocab_size: dropped as padding, not lost.
void drop_trimmed_shards(const OutputTensor& t, const std::vector<OutputTensor>& made,
                         const std::vector<TensorRef>& sources, SourceLedger& ledger) {
    std::set<uint32_t> kept;
    for (const auto& o : made)
        for (const auto& c : o.copies) kept.insert(c.source);
    for (const auto& c : t.copies)
        if (!kept.count(c.source)) ledger.drop(sources[c.source], DropReason::VocabPadding);
}

// When `t`, assembled from equal tensor-parallel row shards, holds a whole fraction of the
// `expected` rows: the rank folders that would hold the rest are the likely cause (a missing
// last rank folder leaves no hole to notice, only fewer rows). "" otherwise.
std::string missing_shards_hint(const OutputTensor& t, int64_t expected) {
    const int64_t pieces = static_cast<int64_t>(t.copies.size());
    if (pieces == 0 || t.shape.empty() || t.shape[0] % pieces != 0) return "";
    const int64_t per_piece = t.shape[0] / pieces;
    for (const auto& c : t.copies)
        if (c.extent.empty() || c.extent[0] != per_piece) return "";
    if (per_piece == 0 || expected % per_piece != 0 || expected / per_piece <= pieces) return "";
    return "; it is assembled from " + std::to_string(pieces) + " tensor-parallel shards of " + std::to_string(per_piece) +
           " rows, and config.json implies " + std::to_string(expected / per_piece) +
           ": are tensor-parallel rank folders (files) missing?";
}

// Where one of q, k, v goes: its output tensor and the row its first head starts at.
struct QkvPart {
    OutputTensor* tensor;
    int64_t base_row;
};

// Megatron's fused qkv rows, grouped per query group g of ng: [the group's nq/ng q heads; its k
// head; its v head], each head d rows (docs/reference/megatron-formats.md §3.7). Head h of q
// (k, v: group g) lands at row base + h*d of its part: separate q/k/v tensors (base 0 each) or
// one [Q; K; V] tensor (bases 0, nq*d, (nq+ng)*d). Whole-row box copies, nothing computed.
void regroup_qkv(const OutputTensor& t, int64_t nq, int64_t ng, int64_t d, const std::array<QkvPart, 3>& parts) {
    const int64_t per_group = nq / ng;
    for (int64_t g = 0; g < ng; ++g) {
        const int64_t base = g * (per_group + 2) * d;
        take_rows(t, base, per_group * d, *parts[0].tensor, parts[0].base_row + g * per_group * d);
        take_rows(t, base + per_group * d, d, *parts[1].tensor, parts[1].base_row + g * d);
        take_rows(t, base + (per_group + 1) * d, d, *parts[2].tensor, parts[2].base_row + g * d);
    }
}

// An Error unless `t` has the (nq + 2 ng) d rows of a fused qkv; `sizes` says how they add up.
void check_qkv_rows(const OutputTensor& t, int64_t nq, int64_t ng, int64_t d, const std::string& sizes) {
    const int64_t want = (nq + 2 * ng) * d;
    if (t.shape.empty() || t.shape[0] != want)
        throw Error(t.name + ": " + shape_to_string(t.shape) + " rows, but " + sizes + " = " + std::to_string(want) +
                    missing_shards_hint(t, want));
}

// Megatron's gated attention rows (attention_output_gate), per query group g of ng: [its nq/ng q
// heads; their gate heads; k_g; v_g], each head d rows. HF's q_proj holds per head h [q_h;
// gate_h] (rows 2hd and 2hd + d); k and v as in regroup_qkv. Whole-row box copies.
void regroup_gated_qkv(const OutputTensor& t, int64_t nq, int64_t ng, int64_t d, OutputTensor& q, OutputTensor& k,
                       OutputTensor& v) {
    const int64_t per_group = nq / ng;
    for (int64_t g = 0; g < ng; ++g) {
        const int64_t base = g * (2 * per_group + 2) * d;
        for (int64_t j = 0; j < per_group; ++j) {
            const int64_t h = g * per_group + j;
            take_rows(t, base + j * d, d, q, 2 * h * d);
            take_rows(t, base + (per_group + j) * d, d, q, (2 * h + 1) * d);
        }
        take_rows(t, base + 2 * per_group * d, d, k, g * d);
        take_rows(t, base + (2 * per_group + 1) * d, d, v, g * d);
    }
}

// Split grouped_sections: `t` is the rule's sections [s0; s1; ...] (rows `rows`), each cut into
// `groups` chunks; HF tensor k holds, per group g, chunk g of each section that goes to k, in
// section order (the gated delta-net's in_proj_qkvz per key head [q_g; k_g; v_g; z_g]).
std::vector<OutputTensor> regroup_sections(const OutputTensor& t, const TableRule& rule, int64_t groups,
                                           const std::vector<std::string>& names) {
    const std::vector<int64_t>& rows = rule.section_rows;
    const auto [total, sum] = section_rows_sum(rows);
    if (t.shape.empty() || t.shape[0] != total)
        throw Error(t.name + ": " + shape_to_string(t.shape) + " rows, but its sections are " + sum + " = " +
                    std::to_string(total) + " rows by config.json" + missing_shards_hint(t, total));
    std::vector<int64_t> group_rows(names.size(), 0);  // rows of one group in each HF tensor
    for (size_t s = 0; s < rows.size(); ++s) {
        if (groups <= 0 || rows[s] % groups != 0)
            throw Error(t.name + ": section " + std::to_string(s) + " (" + std::to_string(rows[s]) + " rows) does not split into " +
                        std::to_string(groups) + " groups ('" + rule.groups->text() + "' in config.json)");
        group_rows[rule.sections[s].to] += rows[s] / groups;
    }
    std::vector<OutputTensor> made;
    for (size_t k = 0; k < names.size(); ++k) {
        Shape shape = t.shape;
        shape[0] = group_rows[k] * groups;
        made.push_back(new_output(t, names[k], shape));
    }
    for (int64_t g = 0; g < groups; ++g) {
        std::vector<int64_t> at(names.size());
        for (size_t k = 0; k < names.size(); ++k) at[k] = g * group_rows[k];
        int64_t section_start = 0;
        for (size_t s = 0; s < rows.size(); ++s) {
            const int64_t chunk = rows[s] / groups;
            const size_t k = rule.sections[s].to;
            take_rows(t, section_start + g * chunk, chunk, made[k], at[k]);
            at[k] += chunk;
            section_start += rows[s];
        }
    }
    return made;
}

// torch_dist keeps each section of a sectioned tensor as a tensor of its own, `<key>.<part>`
// (megatron-core's gated delta-net: in_proj.weight.query ... .alpha): joined here, in the rule's
// section order, into the whole tensor a legacy save's ranks hold in pieces. Every part of a
// tensor must be there; parts a rule does not name stay as they are (unmapped).
std::vector<OutputTensor> join_section_parts(std::vector<OutputTensor> tensors, const ArchitectureInfo& arch) {
    // Most tables name no section parts: their tensors are not looked at again.
    if (std::none_of(arch.rules.begin(), arch.rules.end(),
                     [](const TableRule& r) { return !r.sections.empty() && !r.sections[0].part.empty(); }))
        return tensors;
    struct Joining {
        const TableRule* rule = nullptr;
        std::vector<std::optional<size_t>> parts;  // index in `tensors`, per section
    };
    std::map<std::string, Joining> joins;
    for (size_t n = 0; n < tensors.size(); ++n) {
        const size_t dot = tensors[n].name.rfind('.');
        if (dot == std::string::npos) continue;
        const std::string whole = tensors[n].name.substr(0, dot), part = tensors[n].name.substr(dot + 1);
        int64_t depth = 0;
        const auto mtp_key = mtp_rule_key(arch, whole, depth);
        const auto match = match_rule(arch, mtp_key ? *mtp_key : whole);
        if (!match) continue;
        const auto& sections = match->rule->sections;
        const auto s = std::find_if(sections.begin(), sections.end(), [&](const TableSection& x) { return x.part == part; });
        if (part.empty() || s == sections.end()) continue;
        Joining& j = joins[whole];
        j.rule = match->rule;
        j.parts.resize(sections.size());
        j.parts[static_cast<size_t>(s - sections.begin())] = n;
    }
    if (joins.empty()) return tensors;
    std::map<size_t, OutputTensor> joined_at;  // the first part's place -> the whole tensor
    std::set<size_t> taken;
    for (const auto& [whole, j] : joins) {
        std::vector<std::string> missing, present;
        for (size_t s = 0; s < j.parts.size(); ++s)
            (j.parts[s] ? present : missing).push_back(whole + "." + j.rule->sections[s].part);
        if (!missing.empty())
            throw Error("the checkpoint holds " + list_names(present) + " but not " + list_names(missing) +
                        ": the sections of " + whole + " (rule " + std::to_string(j.rule->index) + " of " + arch.table_file +
                        ") come together");
        OutputTensor t = new_output(tensors[*j.parts[0]], whole, tensors[*j.parts[0]].shape);
        int64_t row = 0;
        for (size_t s = 0; s < j.parts.size(); ++s) {
            const size_t index = *j.parts[s];
            const OutputTensor& part = tensors[index];
            if (part.shape.empty() || part.shape.size() != t.shape.size() || part.source_dtype != t.source_dtype ||
                !std::equal(part.shape.begin() + 1, part.shape.end(), t.shape.begin() + 1))
                throw Error(part.name + ": " + std::string(torch_name(part.source_dtype)) + " " + shape_to_string(part.shape) +
                            " does not join " + tensors[*j.parts[0]].name + " (" + std::string(torch_name(t.source_dtype)) + " " +
                            shape_to_string(t.shape) + ") on dim 0");
            if (part.shape[0] != j.rule->section_rows[s])
                throw Error(part.name + ": " + shape_to_string(part.shape) + ", but section '" + j.rule->sections[s].part +
                            "' has " + std::to_string(j.rule->section_rows[s]) + " rows ('" + j.rule->sections[s].rows.text() +
                            "' in config.json)");
            for (BoxCopy c : part.copies) {
                c.dst_start[0] += row;
                t.copies.push_back(std::move(c));
            }
            row += part.shape[0];
            taken.insert(index);
        }
        t.shape[0] = row;
        joined_at.emplace(*j.parts[0], std::move(t));
    }
    std::vector<OutputTensor> out;
    for (size_t n = 0; n < tensors.size(); ++n) {
        if (auto it = joined_at.find(n); it != joined_at.end()) out.push_back(std::move(it->second));
        else if (!taken.count(n)) out.push_back(std::move(tensors[n]));
    }
    return out;
}

// Split vocab: rows trimmed to config.json's vocab_size (Megatron pads the vocabulary), or, with
// --pad_vocab, zero-filled up to it.
OutputTensor split_vocab(const OutputTensor& t, const std::string& name, const ArchitectureInfo& arch,
                         std::vector<std::string>& notes) {
    const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
    Shape shape = t.shape;
    shape[0] = arch.vocab;
    OutputTensor o = new_output(t, name, shape);
    take_rows(t, 0, std::min(rows, arch.vocab), o, 0);
    if (rows > arch.vocab)
        notes.push_back(t.name + ": " + std::to_string(rows - arch.vocab) + " padded vocabulary rows dropped (vocab_size " +
                        std::to_string(arch.vocab) + ")");
    if (rows < arch.vocab) {
        if (!arch.pad_vocab)
            throw Error(t.name + ": " + std::to_string(rows) + " rows, but config.json says vocab_size " +
                        std::to_string(arch.vocab) + ": the config does not match this checkpoint (pass the "
                        "model's own --hf_config, or --pad_vocab to write the missing rows as zeros)" +
                        missing_shards_hint(t, arch.vocab));
        o.zero_fill = true;
        notes.push_back(t.name + ": " + std::to_string(rows) + " rows, config.json vocab_size is " +
                        std::to_string(arch.vocab) + "; the missing rows are written as zeros");
    }
    return o;
}

// Split qkv or qkv_gated: separate q, k and v tensors from Megatron's rows per query group; with
// `gated` (attention_output_gate) each group also holds its q heads' gate heads, and q_proj holds
// per head [q_h; gate_h].
std::vector<OutputTensor> split_qkv(const OutputTensor& t, const std::vector<std::string>& names,
                                    const ArchitectureInfo& arch, const HfConfig& config, bool gated) {
    const int64_t nq = arch.heads, ng = arch.kv_heads, d = arch.head_dim, q_heads = gated ? 2 * nq : nq;
    if (ng <= 0 || nq % ng != 0)
        throw Error(config.dir + "/config.json: num_attention_heads " + std::to_string(nq) +
                    " is not a multiple of num_key_value_heads " + std::to_string(ng));
    check_qkv_rows(t, q_heads, ng, d,
                   (gated ? "(2 x heads " + std::to_string(nq) + " (q and its gate)" : "(heads " + std::to_string(nq)) +
                       " + 2 x kv heads " + std::to_string(ng) + ") x head_dim " + std::to_string(d));
    Shape q = t.shape, kv = t.shape;
    q[0] = q_heads * d;
    kv[0] = ng * d;
    std::vector<OutputTensor> parts{new_output(t, names[0], q), new_output(t, names[1], kv), new_output(t, names[2], kv)};
    if (gated) regroup_gated_qkv(t, nq, ng, d, parts[0], parts[1], parts[2]);
    else regroup_qkv(t, nq, ng, d, {QkvPart{&parts[0], 0}, QkvPart{&parts[1], 0}, QkvPart{&parts[2], 0}});
    return parts;
}

// Split qkv_per_head: rows grouped per head [q_h; k_h; v_h], every head its own group; HF's fused
// qkv holds [Q; K; V] in one tensor.
OutputTensor split_qkv_per_head(const OutputTensor& t, const RuleMatch& match, const ArchitectureInfo& arch,
                                const HfConfig& config) {
    const std::string& name = match.hf_names[0];
    const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
    const int64_t heads = evaluate_int(*match.rule->groups, scope);
    const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
    const std::string counted = " heads (" + match.rule->groups->text() + " in " + config.dir + "/config.json)";
    if (heads <= 0 || rows % (3 * heads) != 0)
        throw Error(t.name + ": " + shape_to_string(t.shape) + " rows are not q, k and v of " + std::to_string(heads) +
                    counted + " of one head dim");
    const int64_t d = rows / (3 * heads);
    // The rows config.json implies, when the tensor set knows the output: a shortfall is named
    // here, before the regroup would scatter the rows it has.
    if (auto it = arch.expected.required.find(name); it != arch.expected.required.end() && !it->second.empty())
        check_qkv_rows(t, heads, heads, it->second[0] / (3 * heads),
                       "3 x " + std::to_string(heads) + counted + " x head dim " + std::to_string(it->second[0] / (3 * heads)));
    OutputTensor o = new_output(t, name, t.shape);
    regroup_qkv(t, heads, heads, d, {QkvPart{&o, 0}, QkvPart{&o, heads * d}, QkvPart{&o, 2 * heads * d}});
    return o;
}

}  // namespace

std::vector<OutputTensor> split_to_hf(const OutputTensor& t, const RuleMatch& match, const ArchitectureInfo& arch,
                                      const HfConfig& config, std::vector<std::string>& notes) {
    std::vector<OutputTensor> made;
    const auto& names = match.hf_names;
    switch (match.rule->split) {
        case NameSplit::None: {
            OutputTensor o = new_output(t, names[0], t.shape);
            o.copies = t.copies;
            made.push_back(std::move(o));
            break;
        }
        case NameSplit::Vocab: made.push_back(split_vocab(t, names[0], arch, notes)); break;
        case NameSplit::GateUp: {
            if (t.shape.empty() || t.shape[0] % 2 != 0)
                throw Error(t.name + ": " + shape_to_string(t.shape) + " cannot be split into gate and up halves");
            const int64_t half = t.shape[0] / 2;
            for (int part = 0; part < 2; ++part) {
                Shape shape = t.shape;
                shape[0] = half;
                OutputTensor o = new_output(t, names[part], shape);
                take_rows(t, part * half, half, o, 0);
                made.push_back(std::move(o));
            }
            break;
        }
        case NameSplit::Qkv:
        case NameSplit::QkvGated: made = split_qkv(t, names, arch, config, match.rule->split == NameSplit::QkvGated); break;
        case NameSplit::GroupedSections: {
            const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
            made = regroup_sections(t, *match.rule, evaluate_int(*match.rule->groups, scope), names);
            break;
        }
        case NameSplit::QkvPerHead: made.push_back(split_qkv_per_head(t, match, arch, config)); break;
    }
    for (auto& o : made) o.value_offset = match.rule->add;
    return made;
}

TensorMapping megatron_to_hf(TensorMapping canonical, const ArchitectureInfo& arch, const HfConfig& config,
                             bool allow_unmapped, std::vector<std::string>& notes,
                             SourceLedger* ledger, nlohmann::ordered_json* applied) {
    TensorMapping out;
    out.sources = std::move(canonical.sources);
    std::vector<std::string> unmapped;
    OutputNames produced("the Megatron checkpoint");
    const bool tied = config.tie_word_embeddings && !arch.value_model;
    bool dropped_tied_head = false;
    size_t dropped_mtp = 0, dropped_by_table = 0;
    bool mtp_without_rule = false, mtp_beyond_config = false;  // why unmapped MTP tensors are unmapped
    std::map<size_t, size_t> used;  // rule index -> tensors it took
    ExpertStacks stacks;            // per-expert tensors of stack_experts rules, fused at the end
    const auto emit = [&](OutputTensor& o, const std::string& from) {  // `o` is moved into the output last
        produced.claim(o.name, from);
        check_copies_tile_output(o, out.sources);
        out.tensors.push_back(std::move(o));
    };
    for (const OutputTensor& t : join_section_parts(std::move(canonical.tensors), arch)) {
        if (arch.drop_mtp && t.name.starts_with("mtp.")) {
            ++dropped_mtp;
            if (ledger) ledger->drop_output(t, out.sources, DropReason::DroppedMtp);
            continue;
        }
        // An MTP depth the config declares maps as decoder layer L + k; others stay unmapped.
        int64_t depth = 0;
        const auto mtp_key = mtp_rule_key(arch, t.name, depth);
        auto match = mtp_key ? (depth < arch.mtp_layers ? match_rule(arch, *mtp_key) : std::nullopt)
                             : match_rule(arch, t.name);
        if (!match) {
            (mtp_key && depth < arch.mtp_layers ? mtp_without_rule : mtp_beyond_config) |= mtp_key.has_value();
            unmapped.push_back(t.name);
            if (ledger) ledger->drop_output(t, out.sources, DropReason::Unmapped);
            continue;
        }
        ++used[match->rule->index];
        if (tied && match->rule->tied_head) {
            dropped_tied_head = true;
            if (ledger) ledger->drop_output(t, out.sources, DropReason::TiedHead);
            continue;
        }
        if (!match->rule->drop.empty()) {
            ++dropped_by_table;
            if (ledger) ledger->drop_output(t, out.sources, DropReason::TableDrop);
            continue;
        }
        std::vector<OutputTensor> made = split_to_hf(t, *match, arch, config, notes);
        if (ledger && match->rule->split == NameSplit::Vocab) drop_trimmed_shards(t, made, out.sources, *ledger);
        if (match->rule->stack_experts) {
            for (auto& o : made) stacks.add(std::move(o), match->expert, t.name, *match->rule);
            continue;
        }
        for (auto& o : made) emit(o, t.name);
    }
    for (auto& o : stacks.finish(config, out.sources)) emit(o, o.name);
    if (dropped_tied_head) notes.push_back("tied word embeddings: the pipeline's output_layer copy is not written");
    if (dropped_mtp)
        notes.push_back("--drop_mtp: " + std::to_string(dropped_mtp) + " multi-token prediction tensors not written");
    if (dropped_by_table)
        notes.push_back(arch.table_file + ": " + std::to_string(dropped_by_table) + " tensors dropped by its rules");
    if (!unmapped.empty()) {
        std::string hint;
        if (mtp_beyond_config)
            hint = " (multi-token prediction layers beyond config.json's num_nextn_predict_layers " +
                   std::to_string(arch.mtp_layers) + ": --drop_mtp leaves them out)";
        else if (mtp_without_rule)
            hint = " (multi-token prediction tensors " + arch.table_file + " has no rule for: --drop_mtp leaves them out)";
        if (!allow_unmapped)
            throw Error("no " + arch.name + " name for these checkpoint tensors (pass --allow_unmapped to drop them): " +
                        list_names(unmapped) + hint);
        std::string all;  // every one: nothing leaves the merge unnamed
        for (const auto& n : unmapped) all += (all.empty() ? "" : ", ") + n;
        notes.push_back("dropped unmapped tensors: " + all);
    }
    std::stable_sort(out.tensors.begin(), out.tensors.end(),
                     [](const OutputTensor& a, const OutputTensor& b) { return hf_tensor_less(a.name, b.name); });
    if (arch.tensor_set_file.empty())
        notes.push_back("the merged tensors are not checked against " + config.dir + "/config.json: no 'hf' table gives " +
                        arch.name + " a tensor_set, and " + arch.table_file + " names no config_check");
    check_against_config(out, config, arch);
    if (applied) *applied = megatron_rules_json(arch, used);
    return out;
}

}  // namespace vmerge
