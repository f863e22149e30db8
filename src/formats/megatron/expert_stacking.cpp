#include "formats/megatron/expert_stacking.h"

#include <algorithm>

#include "architecture/config_check.h"
#include "architecture/config_expression.h"
#include "core/box_region.h"
#include "core/error.h"
#include "formats/table_mapping.h"

namespace vmerge {
namespace {

// The key expert `expert` would have had: the rule's `from` with the layer of a key it did give.
std::string expected_key(const std::string& given_key, int64_t given, int64_t expert) {
    // The given key's expert number is replaced: the rule matched it as `.{e}.`.
    const std::string mark = "." + std::to_string(given) + ".";
    const size_t at = given_key.rfind(mark);
    if (at == std::string::npos) return "expert " + std::to_string(expert);
    return given_key.substr(0, at) + "." + std::to_string(expert) + "." + given_key.substr(at + mark.size());
}

// `part`'s copies as copies into index `expert` of a tensor with one more (leading) axis: each
// reads a view of its source with a unit leading axis (appended to `sources`).
void stack_part(const OutputTensor& part, int64_t expert, OutputTensor& fused, std::vector<TensorRef>& sources) {
    for (const BoxCopy& c : part.copies) {
        TensorRef view = sources[c.source];
        view.shape.insert(view.shape.begin(), 1);
        view.stride.insert(view.stride.begin(), std::max<int64_t>(numel(sources[c.source].shape), 1));
        view.dtensor.reset();
        const auto source = static_cast<uint32_t>(sources.size());
        sources.push_back(std::move(view));
        Shape src{0}, dst{expert}, extent{1};
        src.insert(src.end(), c.src_start.begin(), c.src_start.end());
        dst.insert(dst.end(), c.dst_start.begin(), c.dst_start.end());
        extent.insert(extent.end(), c.extent.begin(), c.extent.end());
        add_copy(fused, source, std::move(src), std::move(dst), std::move(extent));
    }
}

}  // namespace

void ExpertStacks::add(OutputTensor part, const std::string& expert, const std::string& source_key,
                       const TableRule& rule) {
    const int64_t e = std::stoll(expert);
    auto [it, fresh] = stacks_.try_emplace(part.name);
    if (fresh) order_.push_back(part.name);
    Stack& stack = it->second;
    stack.rule = &rule;
    if (auto [k, added] = stack.source_keys.emplace(e, source_key); !added)
        throw Error(part.name + ": expert " + expert + " given twice, by " + k->second + " and " + source_key);
    stack.parts.emplace(e, std::move(part));
}

std::vector<OutputTensor> ExpertStacks::finish(const HfConfig& config, std::vector<TensorRef>& sources) {
    std::vector<OutputTensor> out;
    const ExpressionScope scope{&config.json, config.dir + "/config.json", nullptr, {}};
    for (const std::string& name : order_) {
        Stack& stack = stacks_.at(name);
        const int64_t experts = evaluate_int(*stack.rule->stack_experts, scope);
        const auto& [first_expert, first] = *stack.parts.begin();
        const std::string& first_key = stack.source_keys.at(first_expert);
        std::vector<std::string> missing, beyond;
        for (int64_t e = 0; e < experts; ++e)
            if (!stack.parts.count(e)) missing.push_back(expected_key(first_key, first_expert, e));
        for (const auto& [e, key] : stack.source_keys)
            if (e >= experts) beyond.push_back(key);
        const std::string count = std::to_string(experts) + " experts (" + stack.rule->stack_experts->text() + " in " +
                                  config.dir + "/config.json)";
        if (!missing.empty())
            throw Error(name + ": fused from " + count + ", but the checkpoint has no " + list_names(missing));
        if (!beyond.empty())
            throw Error(name + ": fused from " + count + ", but the checkpoint also has " + list_names(beyond));
        OutputTensor fused;
        fused.name = name;
        fused.source_dtype = fused.dtype = first.source_dtype;
        fused.shape = first.shape;
        fused.shape.insert(fused.shape.begin(), experts);
        for (const auto& [e, part] : stack.parts) {
            if (part.shape != first.shape || part.source_dtype != first.source_dtype)
                throw Error(name + ": " + stack.source_keys.at(e) + " is " + shape_to_string(part.shape) + " " +
                            std::string(torch_name(part.source_dtype)) + ", but " + first_key + " is " + shape_to_string(first.shape) +
                            " " + std::string(torch_name(first.source_dtype)) + ": experts fused into one tensor must agree");
            if (part.lora_delta || part.zero_fill || part.value_offset != 0)
                throw Error(name + ": " + stack.source_keys.at(e) + " carries a LoRA delta, padding or an added value, "
                            "which a fused expert tensor cannot take");
            stack_part(part, e, fused, sources);
        }
        out.push_back(fused_expert_transformed(fused, stack.rule->transform, sources));
    }
    return out;
}

}  // namespace vmerge
