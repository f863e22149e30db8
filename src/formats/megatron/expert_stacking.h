#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "architecture/architecture_table.h"
#include "architecture/hf_config.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// Megatron keeps one tensor per expert (`...experts.{e}.linear_fc1.weight`); transformers 5
// writes some MoE families' experts fused, [E, ...] with expert e at index e of the leading axis
// (Qwen3-VL-MoE's mlp.experts.gate_up_proj [E, 2F, H] and down_proj [E, H, F]). A table rule with
// `stack_experts` collects each expert's tensor here and the fused tensor is made of their box
// copies, each read through a view of its source with a unit leading axis: nothing is computed.
class ExpertStacks {
public:
    // Expert `expert`'s tensor `part` (named as the fused tensor), from the checkpoint key
    // `source_key` under `rule`. An expert given twice is an Error naming both keys.
    void add(OutputTensor part, const std::string& expert, const std::string& source_key, const TableRule& rule);

    // The fused tensors [E, ...], E from each rule's stack_experts over config.json, in the order
    // their first expert came. An expert of 0..E-1 that no key gave (or one beyond E), or experts
    // of different shapes or dtypes, is an Error naming the fused tensor and the keys. A part
    // carrying a LoRA delta is refused (the fold works per output tensor).
    std::vector<OutputTensor> finish(const HfConfig& config, std::vector<TensorRef>& sources);

private:
    struct Stack {
        const TableRule* rule = nullptr;
        std::map<int64_t, OutputTensor> parts;       // expert -> its tensor
        std::map<int64_t, std::string> source_keys;  // expert -> the checkpoint key
    };
    std::vector<std::string> order_;
    std::map<std::string, Stack> stacks_;
};

}  // namespace vmerge
