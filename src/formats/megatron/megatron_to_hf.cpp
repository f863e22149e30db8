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
        case NameSplit::Vocab: {
            const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
            Shape shape = t.shape;
            shape[0] = arch.vocab;
            OutputTensor o = new_output(t, names[0], shape);
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
            made.push_back(std::move(o));
            break;
        }
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
        case NameSplit::Qkv: {
            // Rows grouped per query group: [q heads of the group; k head; v head].
            const int64_t nq = arch.heads, ng = arch.kv_heads, d = arch.head_dim;
            if (ng <= 0 || nq % ng != 0)
                throw Error(config.dir + "/config.json: num_attention_heads " + std::to_string(nq) +
                            " is not a multiple of num_key_value_heads " + std::to_string(ng));
            check_qkv_rows(t, nq, ng, d, "(heads " + std::to_string(nq) + " + 2 x kv heads " + std::to_string(ng) +
                                             ") x head_dim " + std::to_string(d));
            Shape q = t.shape, kv = t.shape;
            q[0] = nq * d;
            kv[0] = ng * d;
            std::vector<OutputTensor> parts{new_output(t, names[0], q), new_output(t, names[1], kv),
                                            new_output(t, names[2], kv)};
            regroup_qkv(t, nq, ng, d, {QkvPart{&parts[0], 0}, QkvPart{&parts[1], 0}, QkvPart{&parts[2], 0}});
            for (auto& part : parts) made.push_back(std::move(part));
            break;
        }
        case NameSplit::QkvPerHead: {
            // Rows grouped per head: [q_h; k_h; v_h], every head its own group; HF's fused qkv
            // holds [Q; K; V] in one tensor.
            const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
            const int64_t heads = evaluate_int(*match.rule->groups, scope);
            const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
            const std::string counted = " heads (" + match.rule->groups->text() + " in " + config.dir + "/config.json)";
            if (heads <= 0 || rows % (3 * heads) != 0)
                throw Error(t.name + ": " + shape_to_string(t.shape) + " rows are not q, k and v of " +
                            std::to_string(heads) + counted + " of one head dim");
            const int64_t d = rows / (3 * heads);
            // The rows config.json implies, when the tensor set knows the output: a shortfall
            // is named here, before the regroup would scatter the rows it has.
            if (auto it = arch.expected.required.find(names[0]); it != arch.expected.required.end() && !it->second.empty())
                check_qkv_rows(t, heads, heads, it->second[0] / (3 * heads), "3 x " + std::to_string(heads) + counted + " x head dim " +
                                   std::to_string(it->second[0] / (3 * heads)));
            OutputTensor o = new_output(t, names[0], t.shape);
            regroup_qkv(t, heads, heads, d, {QkvPart{&o, 0}, QkvPart{&o, heads * d}, QkvPart{&o, 2 * heads * d}});
            made.push_back(std::move(o));
            break;
        }
    }
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
    for (const OutputTensor& t : canonical.tensors) {
        if (arch.drop_mtp && t.name.starts_with("mtp.")) {
            ++dropped_mtp;
            if (ledger) ledger->drop_output(t, out.sources, DropReason::DroppedMtp);
            continue;
        }
        // An MTP depth the config declares maps as decoder layer L + k; others stay unmapped.
        int64_t depth = 0;
        const auto mtp_key = canonical_mtp_key(t.name, arch.layers, depth);
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
