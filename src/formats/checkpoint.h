#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "torch/dcp_metadata.h"
#include "formats/fsdp/fsdp_backend.h"
#include "mapping/hf_config.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/source_ledger.h"
#include "mapping/tensor_mapping.h"

namespace vmerge {

// A torch.save archive to scan: a whole file, or an item inside a .distcp file.
struct ScanJob {
    std::string path;
    uint64_t base = 0;
    uint64_t length = 0;  // 0: to the end of the file
};

// MegatronAdapter: verl's adapter_checkpoint/ (LoRA only; the base comes from MapOptions::lora_base).
enum class Layout { Fsdp, MegatronLegacy, MegatronDist, Dcp, HfSafetensors, MegatronAdapter };

// What `discover` found: the backend, its files, and the archives to scan.
struct DetectedCheckpoint {
    Layout layout = Layout::Fsdp;
    std::string backend;      // fsdp | megatron | dcp
    std::string description;  // for people: "verl FSDP", "Megatron-LM legacy (iteration 20)", ...
    std::string weights_dir;
    std::string default_hf_dir;
    std::vector<std::string> notes;
    std::vector<ScanJob> jobs;
    FsdpCheckpoint fsdp;
    MegatronLegacyCheckpoint legacy;
    DcpMetadata dcp;
};

// Decides the layout of `local_dir` (`backend` auto|fsdp|megatron|dcp) and lists what to scan.
DetectedCheckpoint detect_checkpoint(const std::string& local_dir, const std::string& backend,
                                     std::optional<int> iteration);

struct MapOptions {
    bool is_value_model = false;
    bool tie_word_embedding = false;
    bool allow_unmapped = false;
    std::optional<int> tp_size;
    std::optional<int> pp_size;
    std::string lora_base;  // MegatronAdapter: the HF folder of the base model
};

struct MappedCheckpoint {
    TensorMapping mapping;
    nlohmann::ordered_json facts;  // detected parallelism, architecture, ... for inspect
    std::vector<std::string> notes;
    SourceAccount account;  // every scanned entry: written, or dropped for a named reason
};

// Applies the backend's rules to the scans (`scans[i]` belongs to `ckpt.jobs[i]`). Every
// scanned entry ends in the output or in `account` with its reason; one that ends in
// neither, or an unrecognised object where a tensor belongs, is an Error naming file and key.
MappedCheckpoint map_checkpoint(DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans,
                                const HfConfig& config, const MapOptions& options);

// FSDP and plain DCP name their own tensors: once the output rules have run, their set is
// checked against what config.json implies, as megatron_to_hf does for Megatron (Error
// naming the missing, unexpected and misshapen tensors). An architecture vmerge has no
// table for is not checked, with a note saying so.
void check_output_against_config(MappedCheckpoint& m, const DetectedCheckpoint& ckpt, const HfConfig& config,
                                 const MapOptions& options);

// The merge summary / inspect line for `account` ("dropped 12 source entries: ..."); "" when none.
std::string dropped_summary(const SourceAccount& account);
nlohmann::ordered_json dropped_json(const SourceAccount& account);

}  // namespace vmerge
