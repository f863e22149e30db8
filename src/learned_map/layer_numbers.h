#pragma once
#include <set>
#include <string>
#include <vector>

namespace vmerge {

// Which numbers of one side's tensor names count layers or experts, and which are part of the
// name: a module's index inside an nn.Sequential (Qwen2.5-VL's `visual.merger.mlp.0` / `mlp.2`,
// the activation between them holding no weights). The evidence is the set of numbers every name
// puts after one prefix (earlier numbers written "#": `model.layers.#.mlp.experts`): a list of
// layers or experts holds 0..n-1 and every one of them has weights, so a set with a gap, or one
// that does not start at 0, indexes a Sequential's modules, and its numbers stay in the name.
class LayerNumbers {
public:
    LayerNumbers() = default;  // every number counts layers or experts
    explicit LayerNumbers(const std::vector<std::string>& names);

    // The layer/expert numbers of `name`, in order ("decoder.layers.3.mlp.experts.5.w" -> {3, 5}).
    std::vector<std::string> numbers(const std::string& name) const;
    // `name` with its first layer/expert number written {i} and its second {e}; further numbers,
    // and those that are part of the name, stay as they are.
    std::string pattern(const std::string& name) const;

private:
    bool counts(const std::string& prefix) const { return module_indices_.count(prefix) == 0; }
    std::set<std::string> module_indices_;  // prefixes whose numbers are part of the name
};

}  // namespace vmerge
