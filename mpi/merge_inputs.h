#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "command_line.h"
#include "comm.h"
#include "formats/checkpoint.h"
#include "formats/simulated/routed_planning_figures.h"
#include "formats/simulated/scan_exchange_model.h"
#include "architecture/hf_config.h"
#include "mapping/lora_adapter.h"
#include "mapping/output_config.h"
#include "mapping/quantization.h"
#include "output/target_guard.h"
#include "output/write_journal.h"
#include "plan/output_layout.h"

namespace vmerge {

// What the first three stages (discover, scan, map) give every rank: the same mapping.
struct MergeInputs {
    double scan_seconds = 0;
    double map_seconds = 0;
    DetectedCheckpoint checkpoint;
    // Every rank file's scan until the mapping is made; only inspect's rank 0 keeps them after
    // (its backend facts): a rank's plan needs the mapping, not every file's storage details.
    std::vector<ScannedFile> scans;
    std::string scans_digest;  // rank 0: XXH64 of the scans, for the --resume identity
    // How this rank planned: "routed" (routed_fsdp_merge.h: it received only the scanned entries
    // its rows read) or "all-gather" (every scan), with why the routed planning did not apply
    // where it was tried; and how many scanned entries it received.
    std::string planning = "all-gather";
    std::string planning_note;
    size_t entries_received = 0;
    HfConfig config;
    MappedCheckpoint mapped;
    std::optional<QuantizeSpec> quantize;
    QuantizationPlan quantization;
    OutputConfig output_config;
    LoraResult lora;
    // Rank 0, merging a checkpoint written as stored (an archive): the HF files it holds, written
    // into the output as they are (Backend::hf_files).
    std::map<std::string, std::string> held_files;
    // inspect --simulate: the scan all-gather of a merge over --np ranks, done in this process.
    std::optional<ScanExchangeFigures> exchange;
    // inspect --simulate: each rank's own scans, for the routed-exchange model (routed_exchange_model.h).
    std::shared_ptr<KeptRankMessages> rank_messages;
    // inspect --simulate of a save a merge plans routed: the model of it (routed_fsdp_simulation.h);
    // `planning` is then "routed", else `planning_note` says why the all-gather is modelled.
    std::optional<RoutedPlanningFigures> routed_planning;
    const TensorMapping& mapping() const { return mapped.mapping; }
};

// Discover, scan (spread over the ranks, all-gathered) and map `o.local_dir`.
MergeInputs load_inputs(const Options& o, Comm& comm);

// map: discover and scan `o.local_dir` as a merge does, then its tensors under the checkpoint's
// own canonical names (MapOptions::checkpoint_names), with config.json from `config_dir`; no
// architecture table is applied (map learns it; a legacy Megatron save's tensors come once per
// tp rule their pieces allow, MappedCheckpoint::tp_assemblies). `tables` receives the loaded tables.
MergeInputs load_checkpoint_names(const Options& o, const std::string& config_dir, Comm& comm,
                                  std::shared_ptr<const ArchitectureTables>& tables);

// inspect --simulate: the mapping a checkpoint of the declared layout would give, from
// config.json alone (cluster-scale planning without the files).
MergeInputs simulate_inputs(const Options& o, Comm& comm);

// Files rank 0 writes at commit: config.json when the merge changed what it states, an
// extracted adapter's adapter_config.json; or the HF files a checkpoint written as stored holds.
std::map<std::string, std::string> generated_files(const MergeInputs& in);

// The folders a merge reads: its target must be none of them, inside none and around none.
std::vector<InputFolder> input_folders(const Options& o, const MergeInputs& in);

// What --resume must find unchanged: the plan, the split, the values' recipe and the inputs.
// Rank 0 only (the scans digest is taken there).
ResumeIdentity merge_identity(const MergeInputs& in, const OutputLayout& layout, const Comm& comm, uint64_t budget);

}  // namespace vmerge
