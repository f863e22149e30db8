#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/deepspeed/deepspeed_checkpoint.h"
#include "formats/source_ledger.h"

namespace vmerge {

// ZeRO 1/2/3 rank files as Hugging Face tensors (docs/reference/deepspeed-formats.md §4-§6):
// trainable parameters from the fp32 master partitions (box copies out of the flats, moments never
// read), frozen ones from their fragments, buffers from rank 0's module, aliases as shared_params
// says. `scans` are the optimizer files (rank order), then the model files. What is not written is
// dropped in `ledger`: rotary / _extra_state buffers, the bit16 module copies, the optimizer state.
// `facts` gets stage, world size, groups, padding and the bytes read and skipped.
// `exclude_frozen_parameters`: zero_to_fp32.py's flag, the frozen parameters left out (dropped,
// their names in `left_out`).
TensorMapping map_deepspeed(const DeepSpeedCheckpoint& c, const std::vector<ScannedFile>& scans, SourceLedger& ledger,
                            bool exclude_frozen_parameters, std::set<std::string>& left_out, nlohmann::ordered_json& facts,
                            std::vector<std::string>& notes);

// Whether a PEFT state-dict name is the adapter's own tensor (a LoRA factor or a modules_to_save
// trained copy) rather than a base weight (mapping/peft_names.h parses the names in full; a
// format only needs to tell the two apart).
bool is_peft_adapter_tensor(const std::string& name);

// The flat groups for inspect: "ZeRO-2 param group 0 (...)" -> parameter names.
nlohmann::ordered_json deepspeed_groups(const DeepSpeedCheckpoint& c, const std::vector<ScannedFile>& scans);

}  // namespace vmerge
