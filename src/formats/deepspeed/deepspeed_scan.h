#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor_ref.h"
#include "io/input_file.h"

// Reading one DeepSpeed rank file (a torch.save archive, docs/reference/deepspeed-formats.md §2,
// §3): its data.pkl only, never tensor bytes. Every tensor anywhere in the saved dict becomes a
// scanned entry keyed by its path ("optimizer_state_dict.fp32_flat_groups.0",
// "module.model.norm.weight"), so the ledger accounts for the optimizer moments too; the non-tensor
// facts the merge needs travel as JSON in ScannedFile::metadata.
namespace vmerge {

ScannedFile scan_deepspeed_file(const InputFile& file);

// Path prefixes of the scanned keys.
inline constexpr const char* kModulePrefix = "module.";
inline constexpr const char* kFrozenPrefix = "frozen_param_fragments.";
inline constexpr const char* kZero2FlatPrefix = "optimizer_state_dict.single_partition_of_fp32_groups.";
inline constexpr const char* kZero3FlatPrefix = "optimizer_state_dict.fp32_flat_groups.";

using NamedShapes = std::vector<std::pair<std::string, Shape>>;

// What an optimizer file says besides its tensors.
struct OptimFacts {
    std::optional<int> zero_stage;  // none: not a ZeRO optimizer (BF16_Optimizer)
    std::vector<int64_t> partition_count;
    std::vector<int64_t> group_paddings;
    // DeepSpeed >= 0.19 with zero_optimization.parameter_alignment: per ZeRO-1/2 group, the
    // padding after each parameter (param_shapes order) inside the flat; empty when not saved.
    std::vector<std::vector<int64_t>> param_alignment_paddings;
};

// What a model-states file says besides its tensors.
struct ModelFacts {
    std::vector<NamedShapes> param_shapes;  // one per flat group, in flat order
    std::optional<NamedShapes> frozen_param_shapes;
    std::vector<std::pair<std::string, std::string>> shared_params;  // alias -> the name holding the data
    std::vector<std::string> buffer_names;
    std::optional<int64_t> dp_world_size;
    std::string ds_version;
    std::string optimizer_offload;  // zero_optimization.offload_optimizer.device ("" when none)
};

OptimFacts optim_facts(const ScannedFile& scan);
ModelFacts model_facts(const ScannedFile& scan);

}  // namespace vmerge
