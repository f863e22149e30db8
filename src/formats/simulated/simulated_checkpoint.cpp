// "Cluster scale on paper": the mapping of a checkpoint that does not exist, from config.json
// and a declared layout. The trainer's split is applied to the tensors config.json implies and
// the pieces are handed, as synthetic scans, to the same backend functions a real checkpoint
// goes through (map_fsdp; assemble_megatron_legacy + megatron_to_hf).
#include "formats/simulated/simulated_checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "core/bounded_number.h"
#include "torch/dtensor_placement.h"
#include "core/error.h"
#include "architecture/hf_tensor_order.h"
#include "formats/fsdp/fsdp_backend.h"
#include "architecture/config_expression.h"
#include "architecture/hf_architecture.h"
#include "formats/megatron/megatron_backend.h"

namespace vmerge {
namespace {

const std::string kRoot = "<simulated>";
constexpr uint64_t kMaxFsdpShards = 6'000'000;

int64_t row_elements(const Shape& shape) {
    int64_t n = 1;
    for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
    return n;
}

std::string gb(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GB", static_cast<double>(bytes) / 1e9);
    return text;
}

// One synthetic rank file: entries in state-dict order, each storage a record placed after
// the previous one (a 64-byte ZIP local header, data aligned to 64 bytes as torch.save does).
struct FileBuilder {
    ScannedFile scan;
    uint64_t end = 0;
    uint64_t stored = 0;

    void add(std::string key, DType dtype, Shape shape, uint64_t storage_bytes, int chunk,
             std::optional<DTensorLayout> dtensor = std::nullopt) {
        StateDictEntry e;
        e.key = std::move(key);
        e.chunk = chunk;
        TensorRef& t = e.tensor;
        t.dtype = dtype;
        t.stride = contiguous_strides(shape);
        t.shape = std::move(shape);
        t.storage.file = scan.path;
        t.storage.key = "data/" + std::to_string(scan.tensors.size());
        t.storage.byte_offset = (end + 64 + 63) / 64 * 64;
        t.storage.byte_size = storage_bytes;
        t.dtensor = std::move(dtensor);
        end = t.storage.byte_offset + storage_bytes;
        stored += storage_bytes;
        scan.tensors.push_back(std::move(e));
    }
};

int parse_count(const std::string& spec, const std::string& text, const char* what) {
    const auto value = parse_int_within(text, 1, kMaxWorldSize);
    if (!value)
        throw Error("simulated layout " + spec + ": " + what + " '" + text + "' is not a whole number " +
                    range_text(1, kMaxWorldSize));
    return static_cast<int>(*value);
}

// ---------------------------------------------------------------- FSDP

TensorMapping simulate_fsdp(const HfConfig& config, const ArchitectureInfo& arch, const SimulationSpec& s,
                            std::vector<std::string>& notes, const ScanExchange& exchange) {
    const SimulatedFsdpSave save = simulated_fsdp_save(config, arch, s.world);
    const int W = s.world;
    // Every rank file lists every tensor: W x tensors shard descriptions, which a merge planning
    // from the all-gather also holds (every rank receives every scan). Measured about 1.6 KB each
    // with map_fsdp's indexes and the mapping's sources; refuse what would not fit rather than be
    // killed. (A merge that routes, and its model, hold a rank's share only: routed_fsdp_simulation.h.)
    const uint64_t shards = static_cast<uint64_t>(W) * save.tensors.size();
    if (shards > kMaxFsdpShards)
        throw Error("simulated layout " + std::string("fsdp:") + std::to_string(W) + " of " + arch.name + ": " + std::to_string(W) +
                    " ranks x " + std::to_string(save.tensors.size()) + " tensors = " + std::to_string(shards) +
                    " DTensor shards; at about 1.6 KB of metadata each (" + gb(shards * 1600) +
                    ") neither this model of the all-gather nor a merge planning from it, where every rank "
                    "holds every scan, fits in memory (limit " + std::to_string(kMaxFsdpShards) + " shards)");
    std::vector<ScannedFile> scans;
    scans.reserve(W);
    for (int r = 0; r < W; ++r) scans.push_back(simulated_fsdp_rank_file(save, r));
    if (exchange) scans = exchange(std::move(scans));
    TensorMapping mapping = map_fsdp(scans);
    notes.push_back(save.note);
    return mapping;
}

// ---------------------------------------------------------------- Megatron

// A canonical Megatron tensor: global layer and expert numbers, the whole (TP-merged) shape.
struct Canonical {
    std::string key;
    Shape shape;
    DType dtype = DType::BF16;
    int64_t layer = -1, expert = -1;
};

// Inverse of the name table: for every tensor config.json implies, the Megatron key whose
// rule (match_rule, the forward direction) produces it; parts of a split rule (q|k|v,
// gate|up) are gathered into one canonical tensor. Where the table allows two Megatron
// names (TE fused norms or separate ones), the TE spec is taken: a `X.layer_norm_weight`
// exists only when its linear `X.weight` does (dense MLP, linear_qkv, MLA up-projections);
// otherwise the separate norm (MoE pre_mlp_layernorm, MLA input_layernorm).
struct CanonicalGroup {
    const TableRule* rule = nullptr;
    std::vector<std::optional<Shape>> parts;
    int64_t layer = -1, expert = -1;
};

// One way a rule can give an HF name: the rule, which of its `to` parts, and what that part's
// {i}, {e} and {*} bound in the name.
struct Candidate {
    const TableRule* rule;
    size_t part;
    TableMatch bound;
};

// The rules whose `to` parts match `name`, in table order (the forward direction tries them
// in that order too). Matching the parts themselves, not a pattern guessed from the name, takes
// any numbered path the tables write (visual.blocks.{i}, model.language_model.layers.{i}, a {*}).
std::vector<Candidate> candidates_for(const std::vector<std::pair<const TableRule*, std::vector<std::string>>>& to_parts,
                                      const std::string& name) {
    std::vector<Candidate> out;
    for (const auto& [rule, parts] : to_parts)
        for (size_t k = 0; k < parts.size(); ++k) {
            TableMatch m;
            if (match_pattern(parts[k], name, m)) out.push_back({rule, k, std::move(m)});
        }
    return out;
}

// The decoder layer of a Megatron key as the reader numbers it (`<part>decoder.layers.N.`),
// -1 for none: a rule's {i} may number something else (Qwen3-VL's deepstack mergers).
int64_t key_layer(const std::string& key) {
    const std::string_view marker = "decoder.layers.";
    std::string_view in_part = std::string_view(key).substr(megatron_submodel_prefix(key).size());
    if (!in_part.starts_with(marker)) return -1;
    in_part.remove_prefix(marker.size());
    int64_t layer = 0;
    size_t n = 0;
    for (; n < in_part.size() && std::isdigit(static_cast<unsigned char>(in_part[n])); ++n) layer = layer * 10 + (in_part[n] - '0');
    return n > 0 && n < in_part.size() && in_part[n] == '.' ? layer : -1;
}

// A stack_experts rule's HF tensor [E, ...] holds expert e's Megatron tensor at index e of a
// new leading axis, after the rule's transform: each of the E per-expert keys becomes a group.
// A transpose swapped the last two axes; interleaving gate and up keeps the shape.
bool place_stacked(const std::string& name, const Shape& shape, const Candidate& c, const HfConfig& config,
                   const ArchitectureInfo& arch, std::map<std::string, CanonicalGroup>& groups) {
    const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
    const int64_t experts = evaluate_int(*c.rule->stack_experts, scope);
    if (shape.size() < 2 || shape[0] != experts)
        throw Error("simulated layout: " + name + " " + shape_to_string(shape) + " does not stack " +
                    std::to_string(experts) + " experts (" + c.rule->stack_experts->text() + ")");
    Shape per_expert(shape.begin() + 1, shape.end());
    if (c.rule->transform == TableTransform::Transpose || c.rule->transform == TableTransform::TransposeInterleaveGateUp) {
        if (per_expert.size() < 2) throw Error("simulated layout: " + name + " has no two axes to transpose back");
        std::swap(per_expert[per_expert.size() - 2], per_expert.back());
    }
    std::vector<std::string> keys;
    for (int64_t e = 0; e < experts; ++e) {
        std::string key = fill_table_pattern(c.rule->from, c.bound.layer, std::to_string(e), c.bound.rest);
        const auto match = match_rule(arch, key);
        if (!match || match->rule != c.rule || match->hf_names.size() <= c.part || match->hf_names[c.part] != name)
            return false;
        keys.push_back(std::move(key));
    }
    for (int64_t e = 0; e < experts; ++e) {
        CanonicalGroup& g = groups[keys[e]];
        g.rule = c.rule;
        g.layer = key_layer(keys[e]);
        g.expert = e;
        g.parts = {per_expert};
    }
    return true;
}

// Every tensor config.json implies, placed as a part of the Megatron key that produces it.
std::map<std::string, CanonicalGroup> megatron_groups_for_hf(const HfConfig& config, const ArchitectureInfo& arch) {
    std::vector<std::pair<const TableRule*, std::vector<std::string>>> to_parts;
    for (const TableRule& rule : arch.rules)
        if (!rule.to.empty()) to_parts.emplace_back(&rule, split_names(rule.to));
    std::map<std::string, CanonicalGroup> groups;  // by Megatron key
    auto try_place = [&](const std::string& name, const Shape& shape, const std::vector<Candidate>& candidates,
                         bool allow_fused) -> bool {
        for (const Candidate& c : candidates) {
            if (c.rule->stack_experts) {
                if (place_stacked(name, shape, c, config, arch, groups)) return true;
                continue;
            }
            const std::string key = fill_table_pattern(c.rule->from, c.bound.layer, c.bound.expert, c.bound.rest);
            if (key.ends_with(".layer_norm_weight")) {
                const std::string linear = key.substr(0, key.size() - std::string(".layer_norm_weight").size()) + ".weight";
                if (!allow_fused || !groups.count(linear)) continue;
            }
            // The forward rule must give this very name back (first match wins there too).
            const auto match = match_rule(arch, key);
            if (!match || match->rule != c.rule || match->hf_names.size() <= c.part || match->hf_names[c.part] != name)
                continue;
            CanonicalGroup& g = groups[key];
            g.rule = c.rule;
            g.layer = key_layer(key);
            g.expert = match->expert.empty() ? -1 : std::stoll(match->expert);
            g.parts.resize(match->hf_names.size());
            g.parts[c.part] = shape;
            return true;
        }
        return false;
    };
    auto fail = [&](const std::string& name, const std::vector<Candidate>& candidates) {
        if (candidates.empty())
            throw Error("simulated layout: no Megatron name in the " + arch.name + " table produces " + name);
        throw Error("simulated layout: the " + arch.name + " table's rule " + std::to_string(candidates[0].rule->index) +
                    " names " + name + ", but no Megatron key it matches maps back to it");
    };
    std::vector<std::pair<std::string, std::vector<Candidate>>> deferred;
    for (const auto& [name, shape] : arch.expected.required) {
        std::vector<Candidate> candidates = candidates_for(to_parts, name);
        bool has_fused = false;
        for (const Candidate& c : candidates) has_fused = has_fused || c.rule->from.ends_with(".layer_norm_weight");
        if (has_fused) {
            deferred.emplace_back(name, std::move(candidates));
            continue;
        }
        if (!try_place(name, shape, candidates, false)) fail(name, candidates);
    }
    for (const auto& [name, candidates] : deferred)
        if (!try_place(name, arch.expected.required.at(name), candidates, true)) fail(name, candidates);
    return groups;
}

// The Megatron tensors, in the canonical order, that produce what config.json implies.
std::vector<Canonical> canonical_from_hf(const HfConfig& config, const ArchitectureInfo& arch, const SimulationSpec& s,
                                         std::vector<std::string>& notes) {
    std::map<std::string, CanonicalGroup> groups = megatron_groups_for_hf(config, arch);
    const DType dtype = config.dtype.value_or(DType::F32);
    // Megatron-LM pads the vocabulary to a multiple of make_vocab_size_divisible_by (128) x tp.
    const int64_t multiple = 128LL * s.tp;
    const int64_t vocab_padded = (arch.vocab + multiple - 1) / multiple * multiple;
    std::vector<Canonical> out;
    for (auto& [key, g] : groups) {
        for (size_t k = 0; k < g.parts.size(); ++k)
            if (!g.parts[k])
                throw Error("simulated layout: " + key + " needs " + match_rule(arch, key)->hf_names[k] +
                            ", which config.json does not imply");
        Canonical c;
        c.key = key;
        c.layer = g.layer;
        c.expert = g.expert;
        c.dtype = key.ends_with("router.expert_bias") ? DType::F32 : dtype;  // an fp32 buffer in Megatron
        c.shape = *g.parts[0];
        switch (g.rule->split) {
            case NameSplit::None: break;
            case NameSplit::Vocab: c.shape[0] = vocab_padded; break;
            case NameSplit::GateUp:
            case NameSplit::Qkv:
            case NameSplit::QkvGated:
            case NameSplit::GroupedSections:
            case NameSplit::QkvPerHead:  // the fused tensor holds every part's rows, in whatever order
                for (size_t k = 1; k < g.parts.size(); ++k) {
                    if (Shape(g.parts[k]->begin() + 1, g.parts[k]->end()) != Shape(c.shape.begin() + 1, c.shape.end()))
                        throw Error("simulated layout: the parts of " + key + " differ beyond dim 0");
                    c.shape[0] += (*g.parts[k])[0];
                }
                break;
        }
        out.push_back(std::move(c));
    }
    if (vocab_padded != arch.vocab)
        notes.push_back("simulated Megatron-LM vocabulary padded from " + std::to_string(arch.vocab) + " to " +
                        std::to_string(vocab_padded) + " rows (make_vocab_size_divisible_by 128 x tp " + std::to_string(s.tp) + ")");
    // Legacy files with pp > 1 keep the last stage's output_layer copy of tied embeddings.
    if (config.tie_word_embeddings && !arch.value_model && s.pp > 1) {
        Canonical c;
        c.key = "output_layer.weight";  // under the table's name (language_model.output_layer.weight in a VL model)
        for (const TableRule& rule : arch.rules)
            if (rule.tied_head) {
                c.key = rule.from;
                break;
            }
        c.shape = {vocab_padded, arch.hidden};
        c.dtype = dtype;
        out.push_back(std::move(c));
    }
    auto rank_of = [](const Canonical& c) {
        const std::string_view in_part = std::string_view(c.key).substr(megatron_submodel_prefix(c.key).size());
        if (in_part.starts_with("embedding.")) return 0;
        if (c.layer >= 0) return 1;
        if (in_part.starts_with("decoder.")) return 2;
        return 3;
    };
    // Each part of a multimodal model in turn (its own layer numbers), as its state_dict lists it.
    std::sort(out.begin(), out.end(), [&](const Canonical& a, const Canonical& b) {
        return std::tuple(megatron_submodel_prefix(a.key), rank_of(a), a.layer, a.expert, a.key) <
               std::tuple(megatron_submodel_prefix(b.key), rank_of(b), b.layer, b.expert, b.key);
    });
    return out;
}

std::string rank_dir_name(const SimulationSpec& s, int t, int p, int e) {
    char name[64];
    std::string text;
    std::snprintf(name, sizeof name, "mp_rank_%02d", t);
    text = name;
    if (s.pp > 1) {
        std::snprintf(name, sizeof name, "_%03d", p);
        text += name;
    }
    if (s.ep > 1) {
        std::snprintf(name, sizeof name, "_%03d", e);
        text += name;
    }
    return text;
}

// Which pipeline stage and virtual chunk hold each layer, and its index there: chunks walked
// virtual stage outer, pipeline stage inner (docs/reference/megatron-formats.md §4), layers split
// as evenly as possible, leading chunks taking one more when L % (pp*vpp) != 0.
struct LayerPlacement {
    std::vector<int> stage_of, chunk_of;
    std::vector<int64_t> local_of;
};

LayerPlacement place_layers(int64_t L, const SimulationSpec& s, std::vector<std::string>& notes) {
    const int64_t chunks = static_cast<int64_t>(s.pp) * s.vpp;
    LayerPlacement placed{std::vector<int>(L), std::vector<int>(L), std::vector<int64_t>(L)};
    for (int64_t c = 0, layer = 0; c < chunks; ++c) {
        const int64_t n = L / chunks + (c < L % chunks ? 1 : 0);
        for (int64_t k = 0; k < n; ++k, ++layer) {
            placed.stage_of[layer] = static_cast<int>(c % s.pp);
            placed.chunk_of[layer] = static_cast<int>(c / s.pp);
            placed.local_of[layer] = k;
        }
    }
    if (L % chunks != 0)
        notes.push_back("simulated pipeline: " + std::to_string(L) + " layers over pp " + std::to_string(s.pp) + " x vpp " +
                        std::to_string(s.vpp) + " split as evenly as possible (" + std::to_string(L % chunks) +
                        " leading chunks hold " + std::to_string(L / chunks + 1) + ", the others " +
                        std::to_string(L / chunks) + ")");
    return placed;
}

// The rank files, in discover_megatron_legacy's order (sorted folder names: tp, then pp, then ep).
std::vector<FileBuilder> simulated_rank_files(const SimulationSpec& s, MegatronLegacyCheckpoint& ckpt) {
    ckpt.dir = kRoot + "/iter_0000001";
    ckpt.flavor = "Megatron-LM";
    ckpt.iteration = 1;
    std::vector<FileBuilder> builders;
    for (int t = 0; t < s.tp; ++t)
        for (int p = 0; p < s.pp; ++p)
            for (int e = 0; e < s.ep; ++e) {
                MegatronRankFile f;
                f.dir_name = rank_dir_name(s, t, p, e);
                f.path = ckpt.dir + "/" + f.dir_name + "/model_optim_rng.pt";
                f.tp = t;
                if (s.pp > 1) f.more.push_back(p);
                if (s.ep > 1) f.more.push_back(e);
                FileBuilder b;
                b.scan.path = f.path;
                b.scan.chunks = s.vpp;
                builders.push_back(std::move(b));
                ckpt.files.push_back(std::move(f));
            }
    return builders;
}

// One canonical tensor in the rank files that hold it: its stage, chunk and expert-parallel
// folder, its per-rank key and its tensor-parallel piece (the inverse of the rule
// assemble_megatron_legacy applies).
void add_to_rank_files(const Canonical& c, const ArchitectureInfo& arch, const SimulationSpec& s,
                       const LayerPlacement& layers, int64_t experts_per_ep, std::vector<FileBuilder>& builders) {
    int stage = 0, chunk = 0, ep_rank = -1;  // -1: every expert-parallel folder holds a copy
    std::string key = c.key;
    // A multimodal model's vision encoder (layers, patch embedding, merger) sits whole on the
    // first pipeline stage, numbering its blocks from 0 (mbridge, Megatron-Bridge; the reader's
    // global_layer_offsets counts each part's layers apart); its text model is pipelined as a
    // GPTModel is.
    const std::string part(megatron_submodel_prefix(c.key));
    const bool vision = part == "vision_model.";
    if (c.layer >= 0) {
        if (!vision && c.layer >= static_cast<int64_t>(layers.stage_of.size()))
            throw Error("internal: " + c.key + " beyond the " + std::to_string(layers.stage_of.size()) + " layers");
        stage = vision ? 0 : layers.stage_of[c.layer];
        chunk = vision ? 0 : layers.chunk_of[c.layer];
        const std::string prefix = part + "decoder.layers." + std::to_string(c.layer) + ".";
        std::string rest = c.key.substr(prefix.size());
        if (c.expert >= 0) {
            // TE grouped experts: mlp.experts.{e}.linear_fc1.weight -> mlp.experts.linear_fc1.weight{j}
            const std::string expert_prefix = "mlp.experts." + std::to_string(c.expert) + ".";
            if (!rest.starts_with(expert_prefix)) throw Error("internal: unexpected expert key " + c.key);
            ep_rank = static_cast<int>(c.expert / experts_per_ep);
            rest = "mlp.experts." + rest.substr(expert_prefix.size()) + std::to_string(c.expert % experts_per_ep);
        }
        key = part + "decoder.layers." + std::to_string(vision ? c.layer : layers.local_of[c.layer]) + "." + rest;
    } else if (!vision && !c.key.substr(part.size()).starts_with("embedding.")) {
        stage = s.pp - 1;  // final norm and output layer: the last chunk of the last stage
        chunk = s.vpp - 1;
    }
    TpRule rule = megatron_tp_rule(c.key, arch).value_or(TpRule::Replicated);  // every key here has its rule
    if (rule == TpRule::ReplicatedIfFull) rule = TpRule::Replicated;  // TE spec: duplicated on every rank
    Shape local = c.shape;
    auto split = [&](size_t dim, int64_t parts) {
        if (local.size() <= dim || local[dim] % parts != 0)
            throw Error("simulated layout: tp " + std::to_string(s.tp) + " does not split " + c.key + " " +
                        shape_to_string(c.shape) + " evenly on dim " + std::to_string(dim));
        local[dim] /= s.tp;
    };
    switch (rule) {
        case TpRule::Concat0: split(0, s.tp); break;
        case TpRule::Concat1: split(1, s.tp); break;
        case TpRule::GluHalves: split(0, 2LL * s.tp); break;
        case TpRule::Sections: split(0, s.tp); break;  // every rank [s0_r; s1_r; ...]
        case TpRule::Replicated:
        case TpRule::ReplicatedIfFull: break;
    }
    const uint64_t bytes = static_cast<uint64_t>(numel(local)) * element_size(c.dtype);
    for (int t = 0; t < s.tp; ++t)
        for (int e = 0; e < s.ep; ++e)
            if (ep_rank < 0 || e == ep_rank)
                builders[(static_cast<size_t>(t) * s.pp + stage) * s.ep + e].add(key, c.dtype, local, bytes, chunk);
}

TensorMapping simulate_megatron(const HfConfig& config, const ArchitectureInfo& arch, const SimulationSpec& s,
                                std::vector<std::string>& notes, const ScanExchange& exchange) {
    const std::vector<Canonical> canonical = canonical_from_hf(config, arch, s, notes);
    const LayerPlacement layers = place_layers(arch.layers, s, notes);
    int64_t experts = 0;
    for (const auto& c : canonical) experts = std::max(experts, c.expert + 1);
    if (s.ep > 1 && experts == 0) throw Error("simulated layout: ep " + std::to_string(s.ep) + " needs a MoE model; " + arch.name + " has no experts");
    if (experts % s.ep != 0)
        throw Error("simulated layout: ep " + std::to_string(s.ep) + " does not divide the " + std::to_string(experts) + " experts");
    MegatronLegacyCheckpoint ckpt;
    std::vector<FileBuilder> builders = simulated_rank_files(s, ckpt);
    for (const Canonical& c : canonical) add_to_rank_files(c, arch, s, layers, experts / s.ep, builders);
    std::vector<ScannedFile> scans;
    scans.reserve(builders.size());
    uint64_t stored = 0;
    size_t entries = 0;
    for (auto& b : builders) {
        stored += b.stored;
        entries += b.scan.tensors.size();
        scans.push_back(std::move(b.scan));
    }
    builders.clear();
    if (exchange) scans = exchange(std::move(scans));

    MegatronParallelism found;
    TensorMapping merged = assemble_megatron_legacy(ckpt, scans, arch, found);
    if (found.tp != s.tp || found.pp != s.pp || found.ep != s.ep || found.vpp != s.vpp)
        throw Error("internal: the simulated folders read back as tp " + std::to_string(found.tp) + " pp " +
                    std::to_string(found.pp) + " ep " + std::to_string(found.ep) + " vpp " + std::to_string(found.vpp));
    TensorMapping mapping = megatron_to_hf(std::move(merged), arch, config, false, notes);
    notes.push_back("simulated Megatron-LM legacy checkpoint: " + std::to_string(scans.size()) + " rank files " + ckpt.dir +
                    "/mp_rank_*/model_optim_rng.pt (tp " + std::to_string(s.tp) + ", pp " + std::to_string(s.pp) +
                    ", ep " + std::to_string(s.ep) + ", vpp " + std::to_string(s.vpp) + "; TE spec, grouped experts, " +
                    std::string(torch_name(config.dtype.value_or(DType::F32))) + "), " + std::to_string(entries) +
                    " tensors, " + gb(stored) + " stored");
    return mapping;
}

}  // namespace

SimulatedFsdpSave simulated_fsdp_save(const HfConfig& config, const ArchitectureInfo& arch, int world) {
    SimulatedFsdpSave save;
    save.world = world;
    save.tensors.assign(arch.expected.required.begin(), arch.expected.required.end());
    // A tied model's state_dict() still lists lm_head.weight (the same Parameter): verl saves it.
    if (config.tie_word_embeddings && !arch.value_model) save.tensors.emplace_back("lm_head.weight", Shape{arch.vocab, arch.hidden});
    std::sort(save.tensors.begin(), save.tensors.end(),
              [](const auto& a, const auto& b) { return hf_tensor_less(a.first, b.first); });
    uint64_t stored = 0;
    for (const auto& [name, global] : save.tensors) {
        if (global.empty()) throw Error("internal: " + name + " is 0-d; FSDP2 cannot Shard(0) it");
        stored += static_cast<uint64_t>((global[0] + world - 1) / world * row_elements(global)) * element_size(DType::F32);
    }
    save.note = "simulated verl FSDP2 checkpoint: " + std::to_string(world) + " rank files " + kRoot +
                "/model_world_size_" + std::to_string(world) + "_rank_*.pt, " + std::to_string(save.tensors.size()) +
                " fp32 DTensors each (Shard(0) on a 1-d \"fsdp\" mesh, padded to ceil(rows/W) rows), " +
                gb(stored * static_cast<uint64_t>(world)) + " stored";
    return save;
}

SimulatedFsdpSave simulated_fsdp_save(const HfConfig& config, const std::string& spec, const ArchitectureTables& tables) {
    const SimulationSpec s = parse_simulation_spec(spec);
    if (s.backend != "fsdp") throw Error("internal: " + spec + " is not an FSDP layout");
    return simulated_fsdp_save(config, architecture_for(config, false, /*drop_mtp=*/true, tables), s.world);
}

std::string simulated_fsdp_rank_path(int world, int rank) {
    return kRoot + "/model_world_size_" + std::to_string(world) + "_rank_" + std::to_string(rank) + ".pt";
}

ScannedFile simulated_fsdp_rank_file(const SimulatedFsdpSave& save, int r) {
    const int W = save.world;
    FileBuilder f;
    f.scan.path = simulated_fsdp_rank_path(W, r);
    f.scan.tensors.reserve(save.tensors.size());
    for (const auto& [name, global] : save.tensors) {
        // FSDP2: a padded buffer of ceil(N/W) rows per rank, the shard a torch.chunk view of it.
        const int64_t padded = (global[0] + W - 1) / W;
        Shape local = global;
        local[0] = chunk_range(global[0], W, r).second;
        DTensorLayout layout;
        layout.global_shape = global;
        layout.mesh_shape = {W};
        layout.mesh_dim_names = {"fsdp"};
        layout.coordinates = {r};
        Placement shard;
        shard.kind = Placement::Kind::Shard;
        shard.dim = 0;
        layout.placements = {shard};
        const uint64_t bytes = static_cast<uint64_t>(padded * row_elements(global)) * element_size(DType::F32);
        f.add(name, DType::F32, std::move(local), bytes, 0, std::move(layout));
    }
    return std::move(f.scan);
}

SimulationSpec parse_simulation_spec(const std::string& spec) {
    SimulationSpec s;
    const size_t colon = spec.find(':');
    s.backend = spec.substr(0, colon);
    const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
    if (s.backend == "fsdp") {
        s.world = parse_count(spec, rest, "world size");
        return s;
    }
    if (s.backend != "megatron")
        throw Error("simulated layout " + spec + ": expected fsdp:W or megatron:tpN,ppN,epN[,vppN]");
    std::set<std::string> seen;
    std::stringstream items(rest);
    for (std::string item; std::getline(items, item, ',');) {
        size_t letters = 0;
        while (letters < item.size() && std::isalpha(static_cast<unsigned char>(item[letters]))) ++letters;
        const std::string name = item.substr(0, letters);
        int* target = name == "tp" ? &s.tp : name == "pp" ? &s.pp : name == "ep" ? &s.ep : name == "vpp" ? &s.vpp : nullptr;
        if (!target || !seen.insert(name).second)
            throw Error("simulated layout " + spec + ": '" + item + "' is not one of tpN, ppN, epN, vppN (each at most once)");
        *target = parse_count(spec, item.substr(letters), name.c_str());
    }
    if (s.tp > 99 || s.pp > 999 || s.ep > 999)
        throw Error("simulated layout " + spec + ": Megatron folder names hold tp < 100, pp and ep < 1000");
    if (int64_t{s.tp} * s.pp * s.ep > kMaxWorldSize)
        throw Error("simulated layout " + spec + ": tp x pp x ep = " + std::to_string(int64_t{s.tp} * s.pp * s.ep) +
                    " rank folders: expected at most " + std::to_string(kMaxWorldSize));
    return s;
}

TensorMapping simulate_checkpoint(const HfConfig& config, const std::string& spec, const ArchitectureTables& tables,
                                  std::vector<std::string>& notes, const ScanExchange& exchange) {
    const SimulationSpec s = parse_simulation_spec(spec);
    // Simulations hold no MTP layers.
    const ArchitectureInfo arch = architecture_for(config, false, /*drop_mtp=*/true, tables);
    return s.backend == "fsdp" ? simulate_fsdp(config, arch, s, notes, exchange)
                               : simulate_megatron(config, arch, s, notes, exchange);
}

uint64_t mapping_read_bytes(const TensorMapping& mapping) {
    uint64_t bytes = 0;
    for (const auto& t : mapping.tensors)
        for (const auto& c : t.copies)
            bytes += static_cast<uint64_t>(numel(c.extent)) * element_size(mapping.sources[c.source].dtype);
    return bytes;
}

}  // namespace vmerge
