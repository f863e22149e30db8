#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text_pattern.h"
#include "torch/dcp_metadata.h"
#include "architecture/hf_architecture.h"
#include "formats/source_ledger.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// One per-rank file of a legacy (non-distributed) Megatron checkpoint. The directory name gives tp
// and up to two more indices (docs/reference/megatron-formats.md §1.1); whether a lone second index
// is the pipeline or the expert rank is settled after scanning.
struct MegatronRankFile {
    std::string path;
    std::string dir_name;  // mp_rank_TT[_PPP][_EEE]
    int tp = 0;
    std::vector<int> more;  // the indices after tp
    int pp = 0;
    int ep = 0;
};

// A rank file named `name` (an mp_rank_TT[_PPP][_EEE] folder or adapter file) from its name's
// match: group 1 is tp, groups 2 and 3 the indices after it.
MegatronRankFile rank_file_from_name(const TextMatch& m, const std::string& name);

struct MegatronLegacyCheckpoint {
    std::string dir;     // the folder holding mp_rank_* folders
    std::string flavor;  // "verl" (model.pt, a list of chunks) or "Megatron-LM" (model_optim_rng.pt)
    std::optional<int> iteration;
    std::vector<MegatronRankFile> files;
};

struct MegatronParallelism {
    int tp = 1, pp = 1, vpp = 1, ep = 1;
};

// How the tensor-parallel shards of one canonical Megatron tensor (global layer and expert numbers;
// an MTP key as its decoder layer L + k) combine: the `tp` of the table rule that names it (TpRule,
// docs/reference/megatron-formats.md §2); a LoRA adapter's linear_in / linear_out follow from their
// base weight's rule. nullopt for a key no rule names. Used by assemble_megatron_legacy and,
// inversely, by simulate_checkpoint.
std::optional<TpRule> megatron_tp_rule(const std::string& key, const ArchitectureInfo& arch);
// The whole row counts of the sections of the rule that names `key` (TpRule::Sections); empty
// when none.
std::vector<int64_t> megatron_tp_sections(const std::string& key, const ArchitectureInfo& arch);

// The Megatron-LM iteration folder `dir` points to: `iter_NNNNNNN` of `iteration` when given,
// else the one latest_checkpointed_iteration.txt names (or `release`, with no number); nullopt
// when there is neither. The folder is not checked; a tracker that holds neither a number nor
// "release" is an Error.
struct IterationFolder {
    std::string name;
    std::optional<int> iteration;
};
std::optional<IterationFolder> iteration_folder(const std::string& dir, std::optional<int> iteration);

// The folder under `dir` that iteration_folder names (`dir` itself when there is none); an
// --iteration whose folder is missing is an Error.
std::filesystem::path resolve_iteration_dir(const std::string& dir, std::optional<int> iteration);

// Finds the rank files: verl's <dir>/model/mp_rank_*/model.pt (or <dir>/mp_rank_*), or
// Megatron-LM's tracker file -> iter_NNNNNNN/ (or release/) -> mp_rank_*/model_optim_rng.pt.
// `iteration` picks another iteration than the tracker's.
bool looks_like_megatron_legacy(const std::string& dir);
MegatronLegacyCheckpoint discover_megatron_legacy(const std::string& dir, std::optional<int> iteration);

// Megatron tensors under their canonical names (global layer index, global expert index,
// no layer/expert axis), each assembled from its per-rank pieces by the TP rules of
// docs/reference/megatron-formats.md §2. Pure: `scans[i]` is the scan of `ckpt.files[i]`.
// What it does not use is dropped in `ledger` with its reason (_extra_state, replicas).
TensorMapping assemble_megatron_legacy(const MegatronLegacyCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                                       const ArchitectureInfo& arch, MegatronParallelism& found,
                                       SourceLedger* ledger = nullptr);

// What `map` learns a legacy save's tp rules from: every canonical tensor joined by each tp
// rule its pieces' shapes allow (possibly several: the values choose), `rules[n]` the rule of
// `mapping.tensors[n]`; one name appears once per rule. A single piece (tp 1) is read as is.
struct TpAssemblies {
    TensorMapping mapping;
    std::vector<TpRule> rules;
};
TpAssemblies assemble_megatron_legacy_alternatives(const MegatronLegacyCheckpoint& ckpt,
                                                   const std::vector<ScannedFile>& scans, const ArchitectureInfo& arch,
                                                   MegatronParallelism& found, SourceLedger* ledger);

// Renames and splits canonical Megatron tensors into the HF tensors of `arch` (QKV
// de-interleave, gate/up halves, vocab trim), drops what tying removes, and checks the
// result against the tensors config.json implies. Unmapped keys are an Error listing them
// unless `allow_unmapped`.
// The tied output layer and --allow_unmapped drops are recorded in `ledger`.
// `applied` (inspect --json's "architecture_table"): the table and the rules that took tensors.
// `canonical` is taken by value: a caller that moves it in lends its sources to the result
// instead of holding them twice (every rank maps every source, docs/scaling.md).
TensorMapping megatron_to_hf(TensorMapping canonical, const ArchitectureInfo& arch, const HfConfig& config,
                             bool allow_unmapped, std::vector<std::string>& notes,
                             SourceLedger* ledger = nullptr, nlohmann::ordered_json* applied = nullptr);

// One canonical Megatron tensor as the HF tensors `match` names (the splits above).
std::vector<OutputTensor> split_to_hf(const OutputTensor& t, const RuleMatch& match, const ArchitectureInfo& arch,
                                      const HfConfig& config, std::vector<std::string>& notes);

}  // namespace vmerge
