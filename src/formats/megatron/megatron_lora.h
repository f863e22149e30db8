#pragma once
#include <string>
#include <vector>

#include "architecture/hf_architecture.h"
#include "formats/megatron/megatron_backend.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// verl's Megatron LoRA checkpoints: with PEFT the frozen base is not saved, only
// <actor>/adapter_checkpoint/mp_rank_TT[_PPP][_EEE]_adapter.pt, each a torch.save of
// {"adapter_state_dict": {Megatron-Bridge adapter name: TP-local tensor}} with layer numbers
// local to the pipeline stage. The rank files are read like legacy Megatron rank folders.
bool has_megatron_adapters(const std::string& dir);
MegatronLegacyCheckpoint discover_megatron_adapters(const std::string& dir);

// Moves the Megatron-Bridge adapter tensors (`<module>.adapter.<...>`) out of `canonical` into
// the returned mapping, which shares canonical's sources: a torch_dist archive saved with
// PEFT holds the frozen base, the adapters and their _extra_state together.
TensorMapping take_megatron_adapters(TensorMapping& canonical);

// Canonical adapter tensors (assembled by assemble_megatron_legacy with the adapter TP rules:
// `<module>.adapter.linear_in.weight` = A [r, in], `.adapter.linear_out.weight` = B [out, r])
// as PEFT-wrapped names that apply_lora understands: B is split like its base weight (QKV
// per query group, fc1 into gate/up), A goes unchanged to every HF module the base splits
// into, as Megatron-Bridge exports them; a SequentialMLP expert's adapter
// (`mlp.experts.<e>.linear_fcN.adapter.*`, global e) goes to that expert's HF modules, a shared
// expert's to the shared expert's. DoRA, canonical LoRA and grouped-experts (TEGroupedMLP)
// adapters are refused; every layer of config.json must carry adapters (verl saves only the
// first virtual-pipeline chunk's).
TensorMapping megatron_adapters_to_peft(const TensorMapping& canonical, const ArchitectureInfo& arch,
                                        const HfConfig& config, std::vector<std::string>& notes);

}  // namespace vmerge
