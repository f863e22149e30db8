#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/hf_architecture.h"
#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// A declared training layout, "cluster scale on paper" (docs/scaling.md):
//   fsdp:W                        verl FSDP2, W rank files, every tensor Shard(0) over W, fp32
//   megatron:tp8,pp16,ep8[,vpp2]  Megatron-LM legacy mp_rank_TT[_PPP][_EEE] files (any of the
//                                 four items may be left out: 1)
struct SimulationSpec {
    std::string backend;  // fsdp | megatron
    int world = 1;        // fsdp
    int tp = 1, pp = 1, ep = 1, vpp = 1;  // megatron
};
SimulationSpec parse_simulation_spec(const std::string& spec);

// The mapping a real checkpoint of `spec` for this config.json would give, computed without
// any file: synthetic scans (TensorRefs into `<simulated>/...` paths, storages laid out one
// after another in each rank file, DTensor layouts for FSDP) built by splitting the tensors
// config.json implies (expected_hf_tensors) the way the trainer splits them, then run through
// the real backend: map_fsdp, or assemble_megatron_legacy + megatron_to_hf. So the result has
// the real output names, shapes, order and box copies. Like map_checkpoint it does not apply
// the output rules: call apply_output_rules (dtype, tied lm_head) on it, as the driver does.
// `notes` gets what was assumed (padding, uneven pipeline split, ...) and a summary line.
// `exchange`, when given, gets the synthetic scans before the backend does and returns the
// scans to map (inspect --simulate: the all-gather a merge does, scan_exchange_model.h).
using ScanExchange = std::function<std::vector<ScannedFile>(std::vector<ScannedFile>)>;
// `tables`: the merge's architecture tables (the Megatron names and the tensor set come from them).
TensorMapping simulate_checkpoint(const HfConfig& config, const std::string& spec, const ArchitectureTables& tables,
                                  std::vector<std::string>& notes, const ScanExchange& exchange = {});

// A simulated verl FSDP2 save (fsdp:W), described without its shards: the tensors every rank
// file lists (state-dict order, global shapes) and a note for people. Its rank files are made
// one at a time (simulated_fsdp_rank_file), so a model that needs one rank's files never holds
// the W x tensors shards of the whole save (routed planning: mpi/routed_fsdp_simulation.h).
struct SimulatedFsdpSave {
    int world = 1;
    std::vector<std::pair<std::string, Shape>> tensors;
    std::string note;  // "simulated verl FSDP2 checkpoint: W rank files ..., N GB stored"
};
SimulatedFsdpSave simulated_fsdp_save(const HfConfig& config, const ArchitectureInfo& arch, int world);
// `spec` must be fsdp:W.
SimulatedFsdpSave simulated_fsdp_save(const HfConfig& config, const std::string& spec, const ArchitectureTables& tables);
std::string simulated_fsdp_rank_path(int world, int rank);
// Rank `rank`'s file as its scan: every tensor's Shard(0) piece, fp32, storages one after another.
ScannedFile simulated_fsdp_rank_file(const SimulatedFsdpSave& save, int rank);

// What a merge reads: the source bytes every box copy of `mapping` covers (each byte once;
// padding, replicas and dropped vocabulary rows are not read).
uint64_t mapping_read_bytes(const TensorMapping& mapping);

}  // namespace vmerge
