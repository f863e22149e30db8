#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "architecture/hf_config.h"
#include "architecture/mtp_shared_copies.h"
#include "formats/checkpoint.h"
#include "mapping/lora_adapter.h"
#include "mapping/output_config.h"
#include "mapping/quantization.h"

namespace vmerge {

// What the command line chose for the map stage, beyond the backend's own rules.
struct MapRecipe {
    MapOptions map;                   // the backend's rules; map.tables loaded
    bool tie_word_embedding = false;  // --tie_word_embedding: no lm_head.weight is written
    std::string dtype = "auto";       // --dtype
    std::optional<QuantizeSpec> quantize;
    // The LoRA choice; the recipe fills what the checkpoint says (its folder, why alpha may be
    // unrecorded, the task type), the caller what it read (metadata) and where the output goes.
    LoraOptions lora;
};

// The two steps that read source bytes (exec/tied_embedding.h), run by the caller's ranks when
// the recipe reaches them; unset for a plan without files (inspect --simulate).
struct SourceByteChecks {
    // The MTP layers' copies the checkpoint holds, against their originals (before LoRA).
    std::function<void(const TensorMapping&, const std::vector<MtpSharedCopy>&, bool tied)> mtp_copies;
    // The head that tying would drop, against the embedding (after LoRA, before the rules drop it).
    std::function<void(const TensorMapping&, const HfConfig&, bool tie_word_embedding)> tied_head;
};

// What the map stage gives every rank: the output tensors and what is written beside them.
struct MappedModel {
    MappedCheckpoint mapped;
    LoraResult lora;
    std::optional<QuantizeSpec> quantize;
    QuantizationPlan quantization;
    OutputConfig output_config;
};

// The map stage after the backend's mapping (map_checkpoint, or a simulation of it): LoRA,
// the MTP copies, the tied head, the output rules (dtype, tie), the check against config.json,
// quantization and the config.json that states what is written, in that order. Pure but for
// `checks`; every rank computes the same result from the same inputs.
MappedModel map_model(MappedCheckpoint mapped, const DetectedCheckpoint& checkpoint, const HfConfig& config,
                      const MapRecipe& recipe, const SourceByteChecks& checks = {});

}  // namespace vmerge
