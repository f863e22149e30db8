#include <algorithm>
#include <filesystem>
#include <cctype>
#include <map>
#include <set>
#include <tuple>

#include "core/text_pattern.h"
#include "core/box_region.h"
#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/input_file.h"
#include "io/pointer_file.h"
#include "formats/megatron/megatron_backend.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

const TextPattern kRankDir(R"(mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?)");

bool has_rank_dirs(const fs::path& dir) {
    for (const auto& entry : list_input_folder(dir.string()))
        if (entry.is_folder && kRankDir.full_match(entry.name)) return true;
    return false;
}

std::string iteration_dir_name(int iteration) {
    char name[32];
    std::snprintf(name, sizeof name, "iter_%07d", iteration);
    return name;
}

struct Piece {
    const TensorRef* tensor;
    const MegatronRankFile* file;
};

// A rank-file key taken apart: `decoder.layers.<layer>.<rest>` (or an MTP depth's inner
// layer `mtp.layers.<k>.transformer_layer.<rest>`, whose k needs no pipeline offset), and for
// an expert tensor (grouped `mlp.experts.linear_fcN.<param><expert>` or sequential
// `mlp.experts.local_experts.<expert>.<what>`) its local expert index and the name after it.
struct RankKey {
    std::string part;  // a multimodal model's part (megatron_submodel_prefix), "" for a GPTModel
    int64_t layer = -1;
    std::string mtp_layer;  // "mtp.layers.<k>.transformer_layer." of an MTP key, else ""
    std::string rest;
    int64_t expert = -1;
    std::string expert_rest;  // "linear_fc1.weight", or what follows a sequential expert's index
};

// `where` names the rank file, for a layer or expert number out of bounds.
RankKey parse_rank_key(const std::string& key, const std::string& where) {
    static const TextPattern layer_key(R"(^decoder\.layers\.(\d+)\.(.*)$)");
    static const TextPattern grouped_expert(R"(^mlp\.experts\.(linear_fc[12])\.(weight|bias)(\d+)$)");
    static const TextPattern sequential_expert(R"(^mlp\.experts\.local_experts\.(\d+)\.(.*)$)");
    static const TextPattern mtp_key(R"(^(mtp\.layers\.\d{1,6}\.(?:transformer_layer|mtp_model_layer)\.)(.*)$)");
    RankKey k;
    TextMatch m, x;
    const std::string source = where + ": key '" + key + "':";
    k.part = megatron_submodel_prefix(key);
    const std::string in_part = key.substr(k.part.size());
    if (k.part.empty() && mtp_key.full_match(key, m)) {
        k.mtp_layer = m[1];
        k.rest = m[2];
    } else if (layer_key.full_match(in_part, m)) {
        k.layer = parse_bounded_int(m.str(1), 0, kMaxLayers - 1, source + " layer number");
        k.rest = m[2];
    } else {
        return k;
    }
    if (grouped_expert.full_match(k.rest, x)) {
        k.expert = parse_bounded_int(x.str(3), 0, kMaxExperts - 1, source + " expert number");
        k.expert_rest = std::string(x[1]) + "." + std::string(x[2]);
    } else if (sequential_expert.full_match(k.rest, x)) {
        k.expert = parse_bounded_int(x.str(1), 0, kMaxExperts - 1, source + " expert number");
        k.expert_rest = x[2];
    }
    return k;
}

}  // namespace

std::optional<TpRule> megatron_tp_rule(const std::string& key, const ArchitectureInfo& arch) {
    // LoRA adapters (Megatron-Bridge ParallelLinearAdapter): linear_in is split over r for a
    // column-parallel base and over its input for a row-parallel one; linear_out always over
    // its output rows, laid out like a column-parallel base's rows.
    if (const size_t at = key.find(".adapter.linear_"); at != std::string::npos) {
        const auto base_rule = megatron_tp_rule(key.substr(0, at) + ".weight", arch);
        if (!base_rule) return std::nullopt;
        const bool row_parallel = *base_rule == TpRule::Concat1;
        if (key.compare(at, 18, ".adapter.linear_in") == 0) return row_parallel ? TpRule::Concat1 : TpRule::Concat0;
        return row_parallel ? TpRule::Concat0 : *base_rule;
    }
    int64_t depth = 0;
    const auto mtp_key = mtp_rule_key(arch, key, depth);
    const auto match = match_rule(arch, mtp_key ? *mtp_key : key);
    if (!match) return std::nullopt;
    return match->rule->tp;
}

std::vector<int64_t> megatron_tp_sections(const std::string& key, const ArchitectureInfo& arch) {
    int64_t depth = 0;
    const auto mtp_key = mtp_rule_key(arch, key, depth);
    const auto match = match_rule(arch, mtp_key ? *mtp_key : key);
    return match ? match->rule->section_rows : std::vector<int64_t>{};
}

std::optional<IterationFolder> iteration_folder(const std::string& dir, std::optional<int> iteration) {
    if (iteration) return IterationFolder{iteration_dir_name(*iteration), iteration};
    const fs::path tracker_path = fs::path(dir) / "latest_checkpointed_iteration.txt";
    if (!path_exists(tracker_path.string())) return std::nullopt;
    // Megatron-LM writes the number (or "release") alone; a trailing newline is allowed.
    const std::string tracker = read_pointer_file(dir, "latest_checkpointed_iteration.txt", "a tracker file");
    if (tracker == "release") return IterationFolder{"release", std::nullopt};
    const auto number = parse_int_within(tracker, 0, kMaxIteration);
    if (!number) {
        throw Error(tracker_path.string() + ": holds " + shown_text(tracker) + ", expected 'release' or an iteration number " +
                    range_text(0, kMaxIteration));
    }
    return IterationFolder{iteration_dir_name(static_cast<int>(*number)), static_cast<int>(*number)};
}

fs::path resolve_iteration_dir(const std::string& dir, std::optional<int> iteration) {
    const auto folder = iteration_folder(dir, iteration);
    if (!folder) return dir;
    if (iteration && !path_exists(join_path(dir, folder->name)))
        throw Error((fs::path(dir) / folder->name).string() + ": missing (--iteration " + std::to_string(*iteration) + ")");
    return fs::path(dir) / folder->name;
}

MegatronRankFile rank_file_from_name(const TextMatch& m, const std::string& name) {
    MegatronRankFile file;
    file.dir_name = name;
    // The regexes take 2 or 3 digits: bounded by construction, checked all the same.
    file.tp = static_cast<int>(parse_bounded_int(m.str(1), 0, kMaxWorldSize - 1, name + ": tensor-parallel rank"));
    for (int g = 2; g <= 3; ++g)
        if (!m[g].empty())
            file.more.push_back(static_cast<int>(parse_bounded_int(m.str(g), 0, kMaxWorldSize - 1, name + ": rank")));
    return file;
}

bool looks_like_megatron_legacy(const std::string& dir) {
    const fs::path p(dir);
    return has_rank_dirs(p / "model") || has_rank_dirs(p) || path_exists(join_path(dir, "latest_checkpointed_iteration.txt"));
}

MegatronLegacyCheckpoint discover_megatron_legacy(const std::string& dir, std::optional<int> iteration) {
    MegatronLegacyCheckpoint ckpt;
    fs::path root(dir);
    if (path_exists(join_path(dir, "latest_checkpointed_iteration.txt"))) {
        const IterationFolder folder = *iteration_folder(dir, iteration);
        const fs::path iter_dir = root / folder.name;
        ckpt.iteration = folder.iteration;
        if (!is_folder(iter_dir.string()))
            throw Error(iter_dir.string() + ": missing iteration folder" +
                        (iteration ? " (--iteration " + std::to_string(*iteration) + ")" : " named by the tracker file"));
        root = iter_dir;
    } else if (iteration) {
        if (is_folder(join_path(dir, iteration_dir_name(*iteration)))) root /= iteration_dir_name(*iteration);
        ckpt.iteration = iteration;
    }
    if (has_rank_dirs(root / "model")) root /= "model";
    if (!has_rank_dirs(root)) throw Error(root.string() + ": no mp_rank_* folders");
    ckpt.dir = root.string();
    for (const auto& entry : list_input_folder(root.string())) {
        TextMatch m;
        const std::string& name = entry.name;
        if (!entry.is_folder || !kRankDir.full_match(name, m)) continue;
        MegatronRankFile file = rank_file_from_name(m, name);
        const std::string rank_dir = join_path(root.string(), name);
        const std::string verl = join_path(rank_dir, "model.pt"), mlm = join_path(rank_dir, "model_optim_rng.pt");
        std::string flavor;
        if (path_exists(verl)) {
            file.path = verl;
            flavor = "verl";
        } else if (path_exists(mlm)) {
            file.path = mlm;
            flavor = "Megatron-LM";
        } else {
            throw Error(rank_dir + ": neither model.pt (verl) nor model_optim_rng.pt (Megatron-LM)");
        }
        if (!ckpt.flavor.empty() && ckpt.flavor != flavor)
            throw Error(root.string() + ": mixes verl model.pt and Megatron-LM model_optim_rng.pt folders");
        ckpt.flavor = flavor;
        ckpt.files.push_back(std::move(file));
    }
    std::sort(ckpt.files.begin(), ckpt.files.end(),
              [](const auto& a, const auto& b) { return a.dir_name < b.dir_name; });
    return ckpt;
}

namespace {

using RankIndex = std::map<std::tuple<int, int, int>, size_t>;  // (tp, pp, ep) -> file index
using Shards = std::map<std::string, std::vector<Piece>>;        // canonical key -> pieces by tp rank

// How many decoder layers the file of `scan` holds (the highest local layer number + 1).
int64_t local_layer_count(const ScannedFile& scan, const std::string& where) {
    int64_t count = 0;
    for (const auto& e : scan.tensors) {
        const RankKey k = parse_rank_key(e.key, where);
        count = std::max(count, k.layer + 1);
    }
    return count;
}

// Step 1, which index is which: a lone second index is the pipeline stage unless the
// embedding lives in more than one of those folders, or (verl's adapter files, which hold no
// embedding: mp_rank_TT_EEE without pipeline parallelism) every file already holds all
// `config_layers` layers; then it is the expert rank. Returns the files with their pp and ep
// set, and `found`'s sizes; a missing rank folder or a differing chunk count is an Error. The
// discovery result stays as detect made it.
struct SettledRanks {
    MegatronLegacyCheckpoint ckpt;
    RankIndex by_rank;
};
SettledRanks settle_rank_indices(MegatronLegacyCheckpoint ckpt, const std::vector<ScannedFile>& scans,
                                 int64_t config_layers, MegatronParallelism& found) {
    size_t index_count = ckpt.files.front().more.size();
    for (const auto& f : ckpt.files)
        if (f.more.size() != index_count)
            throw Error(ckpt.dir + ": mp_rank folder names mix index counts (" + ckpt.files.front().dir_name + ", " +
                        f.dir_name + ")");
    bool second_is_ep = false;
    if (index_count == 1) {
        bool every_file_all_layers = config_layers > 0;
        for (size_t i = 0; i < ckpt.files.size(); ++i) {
            every_file_all_layers =
                every_file_all_layers && local_layer_count(scans[i], ckpt.files[i].path) == config_layers;
            if (ckpt.files[i].more[0] == 0) continue;
            for (const auto& e : scans[i].tensors)
                if (e.key.substr(megatron_submodel_prefix(e.key).size()) == "embedding.word_embeddings.weight")
                    second_is_ep = true;
        }
        second_is_ep = second_is_ep || (every_file_all_layers && ckpt.files.size() > 1);
    }
    for (auto& f : ckpt.files) {
        f.pp = 0;
        f.ep = 0;
        if (index_count == 1) (second_is_ep ? f.ep : f.pp) = f.more[0];
        if (index_count == 2) {
            f.pp = f.more[0];
            f.ep = f.more[1];
        }
        found.tp = std::max(found.tp, f.tp + 1);
        found.pp = std::max(found.pp, f.pp + 1);
        found.ep = std::max(found.ep, f.ep + 1);
    }
    RankIndex by_rank;
    for (size_t i = 0; i < ckpt.files.size(); ++i) {
        const auto& f = ckpt.files[i];
        by_rank[{f.tp, f.pp, f.ep}] = i;
    }
    for (int t = 0; t < found.tp; ++t)
        for (int p = 0; p < found.pp; ++p)
            for (int e = 0; e < found.ep; ++e)
                if (!by_rank.count({t, p, e})) {
                    char name[64];
                    if (index_count == 0) std::snprintf(name, sizeof name, "mp_rank_%02d", t);
                    else if (index_count == 1) std::snprintf(name, sizeof name, "mp_rank_%02d_%03d", t, second_is_ep ? e : p);
                    else std::snprintf(name, sizeof name, "mp_rank_%02d_%03d_%03d", t, p, e);
                    throw Error(ckpt.dir + "/" + name + ": missing rank folder (tp " + std::to_string(found.tp) + ", pp " +
                                std::to_string(found.pp) + ", ep " + std::to_string(found.ep) + ")");
                }
    found.vpp = scans[0].chunks;
    for (size_t i = 0; i < scans.size(); ++i)
        if (scans[i].chunks != found.vpp)
            throw Error(ckpt.files[i].path + ": holds " + std::to_string(scans[i].chunks) + " model chunks, " +
                        ckpt.files[0].path + " holds " + std::to_string(found.vpp));
    return {std::move(ckpt), std::move(by_rank)};
}

// Step 2, global layer offsets by walking chunks virtual-stage outer, pipeline stage inner
// (docs/reference/megatron-formats.md §4): correct for even, uneven and empty stages alike.
// Each part of a multimodal model counts its own layers (its vision encoder lives on the first
// stage only and numbers its blocks from 0).
using LayerOffsets = std::map<std::tuple<std::string, int, int>, int64_t>;  // (part, pp, chunk) -> offset
LayerOffsets global_layer_offsets(const std::vector<ScannedFile>& scans, const std::vector<std::vector<RankKey>>& keys,
                                  const RankIndex& by_rank, const MegatronParallelism& found) {
    std::set<std::string> parts;
    for (const auto& file_keys : keys)
        for (const RankKey& k : file_keys) parts.insert(k.part);
    LayerOffsets layer_offset;
    for (const std::string& part : parts) {
        int64_t layers_so_far = 0;
        for (int v = 0; v < found.vpp; ++v)
            for (int p = 0; p < found.pp; ++p) {
                std::set<int64_t> local;
                const size_t file = by_rank.at({0, p, 0});
                for (size_t k = 0; k < keys[file].size(); ++k)
                    if (scans[file].tensors[k].chunk == v && keys[file][k].layer >= 0 && keys[file][k].part == part)
                        local.insert(keys[file][k].layer);
                layer_offset[{part, p, v}] = layers_so_far;
                layers_so_far += static_cast<int64_t>(local.size());
            }
    }
    return layer_offset;
}

// Step 3, canonical names: global layer, global expert (ep_rank * experts per rank + local).
// Every kept entry lands in `shards` under its canonical key (first-seen order in `order`);
// _extra_state and replicas are dropped in `ledger`.
Shards collect_tp_shards(const MegatronLegacyCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                         const std::vector<std::vector<RankKey>>& keys,
                         const LayerOffsets& layer_offset, const MegatronParallelism& found,
                         const ArchitectureInfo& arch, std::vector<std::string>& order, SourceLedger* ledger) {
    std::map<int, int64_t> experts_per_rank;  // by pp stage: max local expert index + 1
    for (size_t i = 0; i < scans.size(); ++i)
        for (const RankKey& k : keys[i])
            if (k.expert >= 0) experts_per_rank[ckpt.files[i].pp] = std::max(experts_per_rank[ckpt.files[i].pp], k.expert + 1);
    Shards shards;
    for (size_t i = 0; i < scans.size(); ++i) {
        const MegatronRankFile& f = ckpt.files[i];
        for (size_t n = 0; n < scans[i].tensors.size(); ++n) {
            const StateDictEntry& e = scans[i].tensors[n];
            if (e.key.find("_extra_state") != std::string::npos) {
                if (ledger) ledger->drop(e.tensor, DropReason::ExtraState);
                continue;
            }
            const RankKey& k = keys[i][n];
            std::string key = e.key;
            const bool expert = k.expert >= 0;
            if (k.layer >= 0) {
                const int64_t global = layer_offset.at({k.part, f.pp, e.chunk}) + k.layer;
                const std::string rest =
                    expert ? "mlp.experts." + std::to_string(f.ep * experts_per_rank[f.pp] + k.expert) + "." + k.expert_rest
                           : k.rest;
                key = k.part + "decoder.layers." + std::to_string(global) + "." + rest;
            } else if (expert) {  // an MTP depth's expert, numbered like the decoder's
                key = k.mtp_layer + "mlp.experts." + std::to_string(f.ep * experts_per_rank[f.pp] + k.expert) + "." +
                      k.expert_rest;
            }
            // Non-expert tensors are repeated in every expert-parallel folder: read rank 0's
            // (its folder sorts first), which must hold the same values.
            if (!expert && f.ep != 0) {
                const auto kept = shards.find(key);
                if (kept == shards.end() || !kept->second[f.tp].tensor)
                    throw Error(f.path + ": '" + key + "' is not in the expert-parallel rank 0 folder of tensor-parallel rank " +
                                std::to_string(f.tp) + ", pipeline stage " + std::to_string(f.pp));
                if (ledger) ledger->drop_replica(key, e.tensor, *kept->second[f.tp].tensor);
                continue;
            }
            auto& pieces = shards[key];
            if (pieces.empty()) {
                pieces.resize(found.tp, Piece{nullptr, nullptr});
                order.push_back(key);
            }
            const bool output_layer = key.substr(megatron_submodel_prefix(key).size()).starts_with("output_layer");
            if (pieces[f.tp].tensor && !(arch.value_model || output_layer))
                throw Error(f.path + ": '" + key + "' is also in " + pieces[f.tp].file->path);
            if (!pieces[f.tp].tensor) pieces[f.tp] = {&e.tensor, &f};
            else if (ledger) ledger->drop_replica(key, e.tensor, *pieces[f.tp].tensor);  // a pipeline stage's output_layer copy
        }
    }
    return shards;
}

// The TP rule of `key`, with ReplicatedIfFull settled: replicated when one shard already has
// the shape config.json implies, else concatenated on the first dim where it falls short (rows
// for a column-parallel shard, columns for a row-parallel one), dim 0 when config.json says
// nothing. A key no rule names is never
// written (unmapped): its shards are read once when they agree, else put side by side on
// dim 0, so that the unmapped error (or --allow_unmapped's list) names it.
TpRule settled_tp_rule(const std::string& key, const std::vector<Piece>& pieces, const ArchitectureInfo& arch) {
    const TensorRef& first = *pieces[0].tensor;
    const auto named = megatron_tp_rule(key, arch);
    if (!named) {
        for (const Piece& p : pieces)
            if (p.tensor->shape != first.shape && !first.shape.empty()) return TpRule::Concat0;
        return TpRule::Replicated;
    }
    TpRule rule = *named;
    if (rule != TpRule::ReplicatedIfFull) return rule;
    rule = TpRule::Concat0;
    int64_t depth = 0;
    const auto mtp_key = mtp_rule_key(arch, key, depth);
    if (auto match = match_rule(arch, mtp_key ? *mtp_key : key)) {
        auto it = arch.expected.required.find(match->hf_names[0]);
        if (it != arch.expected.required.end() && !first.shape.empty() && first.shape.size() == it->second.size()) {
            const Shape& want = it->second;
            if (first.shape[0] == want[0]) rule = first.shape.size() > 1 && first.shape[1] != want[1] ? TpRule::Concat1
                                                                                                   : TpRule::Replicated;
        }
    }
    return rule;
}

// Every TP shard agrees with rank 0's in dtype and rank, and in shape where `rule` needs it.
void check_tp_shards(const std::string& key, const std::vector<Piece>& pieces, TpRule rule) {
    const TensorRef& first = *pieces[0].tensor;
    for (const Piece& piece : pieces) {
        const TensorRef& s = *piece.tensor;
        const std::string& path = piece.file->path;
        if (s.dtype != first.dtype || s.shape.size() != first.shape.size())
            throw Error(path + ": '" + key + "' is " + std::string(torch_name(s.dtype)) + " " + shape_to_string(s.shape) +
                        " but " + std::string(torch_name(first.dtype)) + " " + shape_to_string(first.shape) + " in " +
                        pieces[0].file->path);
        const bool same_shape = s.shape == first.shape;
        if (!same_shape && (rule == TpRule::Replicated || rule == TpRule::GluHalves || rule == TpRule::Sections ||
                            first.shape.empty() ||
                            (rule == TpRule::Concat0 && Shape(s.shape.begin() + 1, s.shape.end()) !=
                                                            Shape(first.shape.begin() + 1, first.shape.end())) ||
                            (rule == TpRule::Concat1 && (s.shape.size() < 2 || s.shape[0] != first.shape[0]))))
            throw Error(path + ": tensor-parallel shard of '" + key + "' is " + shape_to_string(s.shape) + " but " +
                        shape_to_string(first.shape) + " in " + pieces[0].file->path);
    }
}

// TpRule::Sections: each rank holds [s0_r; s1_r; ...], s_r the rank's s / tp rows of section s
// (`sections`: their whole row counts); the canonical tensor is [s0; s1; ...].
void add_section_copies(OutputTensor& t, const std::vector<Piece>& pieces, const std::vector<int64_t>& sections,
                        uint32_t base) {
    const Shape& first = pieces[0].tensor->shape;
    const int64_t tp = static_cast<int64_t>(pieces.size());
    const auto [total, sum] = section_rows_sum(sections);
    const bool even = std::all_of(sections.begin(), sections.end(), [&](int64_t rows) { return rows % tp == 0; });
    if (first.empty() || !even || first[0] * tp != total)
        throw Error(pieces[0].file->path + ": '" + t.name + "' is " + shape_to_string(first) + " on each of " +
                    std::to_string(tp) + " tensor-parallel ranks, but its sections (" + sum + " rows by config.json) " +
                    "give each rank a 1/" + std::to_string(tp) + " of every section: " +
                    (even ? std::to_string(total / tp) + " rows" : "they do not divide evenly"));
    t.shape[0] = total;
    int64_t from_row = 0, section_start = 0;
    for (const int64_t rows : sections) {
        const int64_t per_rank = rows / tp;
        for (int64_t r = 0; r < tp; ++r) {
            Shape src(first.size(), 0), dst(first.size(), 0), extent = first;
            src[0] = from_row;
            dst[0] = section_start + r * per_rank;
            extent[0] = per_rank;
            add_copy(t, base + static_cast<uint32_t>(r), src, dst, extent);
        }
        from_row += per_rank;
        section_start += rows;
    }
}

// The box copies that put the TP shards (sources base .. base+tp-1) into `t` by `rule`
// (`sections`: the rule's section rows, for TpRule::Sections).
void add_tp_copies(OutputTensor& t, const std::vector<Piece>& pieces, TpRule rule, uint32_t base, SourceLedger* ledger,
                   const std::vector<int64_t>& sections = {}) {
    const TensorRef& first = *pieces[0].tensor;
    const int tp = static_cast<int>(pieces.size());
    const size_t ndim = first.shape.size();
    const Shape zeros(ndim, 0);
    switch (rule) {
        case TpRule::Replicated:
        case TpRule::ReplicatedIfFull:
            add_copy(t, base, zeros, zeros, first.shape);
            if (ledger)
                for (int r = 1; r < tp; ++r) ledger->drop_replica(t.name, *pieces[r].tensor, first);
            break;
        case TpRule::Concat0:
        case TpRule::Concat1: {
            const size_t dim = rule == TpRule::Concat0 ? 0 : 1;
            int64_t at = 0;
            for (int r = 0; r < tp; ++r) {
                const Shape& s = pieces[r].tensor->shape;
                Shape dst(ndim, 0);
                dst[dim] = at;
                add_copy(t, base + r, zeros, dst, s);
                at += s[dim];
            }
            t.shape[dim] = at;
            break;
        }
        case TpRule::GluHalves: {
            // Each rank holds [gate_r; up_r]; the canonical tensor is [gate; up].
            const int64_t rows = first.shape[0];
            if (rows % 2 != 0)
                throw Error(pieces[0].file->path + ": gated '" + t.name + "' has an odd row count " + std::to_string(rows));
            const int64_t half = rows / 2;
            t.shape[0] = rows * tp;
            for (int r = 0; r < tp; ++r) {
                Shape extent = first.shape;
                extent[0] = half;
                Shape src(ndim, 0), dst(ndim, 0);
                dst[0] = r * half;
                add_copy(t, base + r, src, dst, extent);
                src[0] = half;
                dst[0] = tp * half + r * half;
                add_copy(t, base + r, src, dst, extent);
            }
            break;
        }
        case TpRule::Sections: add_section_copies(t, pieces, sections, base); break;
    }
}

// Step 4, one canonical tensor from its TP shards, its sources appended to `out.sources`.
OutputTensor assemble_tp_tensor(const std::string& key, const std::vector<Piece>& pieces,
                                const ArchitectureInfo& arch, TensorMapping& out, SourceLedger* ledger) {
    const TensorRef& first = *pieces[0].tensor;
    const TpRule rule = settled_tp_rule(key, pieces, arch);
    OutputTensor t;
    t.name = key;
    t.source_dtype = t.dtype = first.dtype;
    t.shape = first.shape;
    check_tp_shards(key, pieces, rule);
    const uint32_t base = static_cast<uint32_t>(out.sources.size());
    for (const Piece& piece : pieces) out.sources.push_back(*piece.tensor);
    add_tp_copies(t, pieces, rule, base, ledger, rule == TpRule::Sections ? megatron_tp_sections(key, arch) : std::vector<int64_t>{});
    check_copies_tile_output(t, out.sources);
    return t;
}

// Steps 1-3: every kept entry under its canonical key with its pieces by tp rank, keys in
// first-seen order.
struct CanonicalShards {
    MegatronLegacyCheckpoint ckpt;
    Shards shards;
    std::vector<std::string> order;
};
CanonicalShards collect_canonical_shards(const MegatronLegacyCheckpoint& detected, const std::vector<ScannedFile>& scans,
                                         const ArchitectureInfo& arch, MegatronParallelism& found, SourceLedger* ledger) {
    SettledRanks settled = settle_rank_indices(detected, scans, arch.layers, found);
    CanonicalShards out;
    out.ckpt = std::move(settled.ckpt);
    // Every key taken apart once: steps 2-4 all need its layer and expert numbers.
    std::vector<std::vector<RankKey>> keys(scans.size());
    for (size_t i = 0; i < scans.size(); ++i)
        for (const auto& e : scans[i].tensors) keys[i].push_back(parse_rank_key(e.key, out.ckpt.files[i].path));
    const auto layer_offset = global_layer_offsets(scans, keys, settled.by_rank, found);
    out.shards = collect_tp_shards(out.ckpt, scans, keys, layer_offset, found, arch, out.order, ledger);
    for (const std::string& key : out.order) {
        const auto& pieces = out.shards.at(key);
        for (size_t t = 0; t < pieces.size(); ++t)
            if (!pieces[t].tensor)
                throw Error(out.ckpt.dir + ": '" + key + "' is missing from tensor-parallel rank " + std::to_string(t) +
                            " (present in " + pieces[0].file->path + ")");
    }
    return out;
}

// The tp rules whose shape conditions (check_tp_shards) the pieces meet: read once from rank
// 0 (all pieces alike in shape), joined on dim 0, on dim 1, or as [gate_r; up_r] halves. One
// piece joins only one way.
std::vector<TpRule> possible_tp_rules(const std::vector<Piece>& pieces) {
    if (pieces.size() == 1) return {TpRule::Replicated};
    const Shape& first = pieces[0].tensor->shape;
    bool same = true, same_but0 = !first.empty(), same_but1 = first.size() >= 2;
    for (const Piece& p : pieces) {
        const Shape& s = p.tensor->shape;
        if (s.size() != first.size()) return {};
        same = same && s == first;
        for (size_t a = 0; a < s.size(); ++a) {
            same_but0 = same_but0 && (a == 0 || s[a] == first[a]);
            same_but1 = same_but1 && (a == 1 || s[a] == first[a]);
        }
    }
    std::vector<TpRule> rules;
    if (same) rules.push_back(TpRule::Replicated);
    if (same_but0) rules.push_back(TpRule::Concat0);
    if (same_but1) rules.push_back(TpRule::Concat1);
    if (same && !first.empty() && first[0] % 2 == 0) rules.push_back(TpRule::GluHalves);
    return rules;
}

}  // namespace

TensorMapping assemble_megatron_legacy(const MegatronLegacyCheckpoint& detected, const std::vector<ScannedFile>& scans,
                                       const ArchitectureInfo& arch, MegatronParallelism& found,
                                       SourceLedger* ledger) {
    const CanonicalShards canonical = collect_canonical_shards(detected, scans, arch, found, ledger);
    TensorMapping out;
    for (const std::string& key : canonical.order)
        out.tensors.push_back(assemble_tp_tensor(key, canonical.shards.at(key), arch, out, ledger));
    return out;
}

TpAssemblies assemble_megatron_legacy_alternatives(const MegatronLegacyCheckpoint& detected,
                                                   const std::vector<ScannedFile>& scans, const ArchitectureInfo& arch,
                                                   MegatronParallelism& found, SourceLedger* ledger) {
    const CanonicalShards canonical = collect_canonical_shards(detected, scans, arch, found, ledger);
    TpAssemblies out;
    for (const std::string& key : canonical.order) {
        const std::vector<Piece>& pieces = canonical.shards.at(key);
        const uint32_t base = static_cast<uint32_t>(out.mapping.sources.size());
        for (const Piece& piece : pieces) out.mapping.sources.push_back(*piece.tensor);
        for (const Piece& piece : pieces)
            if (piece.tensor->dtype != pieces[0].tensor->dtype)
                throw Error(piece.file->path + ": '" + key + "' is " + std::string(torch_name(piece.tensor->dtype)) +
                            " but " + std::string(torch_name(pieces[0].tensor->dtype)) + " in " + pieces[0].file->path);
        const std::vector<TpRule> rules = possible_tp_rules(pieces);
        if (rules.empty())
            throw Error(pieces[1].file->path + ": tensor-parallel shards of '" + key + "' differ in rank (" +
                        shape_to_string(pieces[1].tensor->shape) + " vs " + shape_to_string(pieces[0].tensor->shape) +
                        " in " + pieces[0].file->path + ")");
        for (const TpRule rule : rules) {
            OutputTensor t;
            t.name = key;
            t.source_dtype = t.dtype = pieces[0].tensor->dtype;
            t.shape = pieces[0].tensor->shape;
            // No ledger: another assembly of the same pieces may take what this one leaves.
            add_tp_copies(t, pieces, rule, base, nullptr);
            out.mapping.tensors.push_back(std::move(t));
            out.rules.push_back(rule);
        }
    }
    return out;
}

}  // namespace vmerge
