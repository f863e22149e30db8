#include "formats/backend_flags.h"

#include "core/bounded_number.h"
#include "core/error.h"

namespace vmerge {

std::string BackendFlags::text(const std::string& name) const {
    const auto it = values_.find(name);
    return it == values_.end() ? std::string() : it->second;
}

std::optional<int> BackendFlags::count(const std::string& name) const {
    const auto it = values_.find(name);
    if (it == values_.end()) return std::nullopt;
    const auto value = parse_int_within(it->second, 0, kMaxIteration);
    if (!value) throw Error("--" + name + " " + it->second + ": expected " + range_text(0, kMaxIteration));
    return static_cast<int>(*value);
}

const BackendFlag& iteration_flag() {
    static const BackendFlag flag{
        "iteration", BackendFlag::Kind::Count, "",
        "Megatron-LM: merge this iteration instead of the latest; torchtitan: this step-N", "",
        "has no iterations to choose from (--iteration picks iter_N/ of a Megatron-LM save, step-N/ of a torchtitan "
        "run, global_step_N/ of a verl run folder)"};
    return flag;
}

const BackendFlag& lora_base_flag() {
    static const BackendFlag flag{
        "lora_base", BackendFlag::Kind::Folder, "",
        "checkpoints that hold only the adapter (Megatron adapter_checkpoint/, Megatron-Bridge LoRA, verl FSDP "
        "save_lora_only, DeepSpeed ZeRO saves of a PEFT model by HF Trainer): the Hugging Face base model the "
        "adapter was trained on",
        "the Hugging Face base model folder",
        "holds no adapter-only weights to add a base model to (--lora_base is for Megatron adapter_checkpoint/, "
        "Megatron-Bridge LoRA, verl FSDP save_lora_only and HF Trainer DeepSpeed PEFT checkpoints)"};
    return flag;
}

}  // namespace vmerge
