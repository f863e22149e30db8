#include "architecture/mtp_shared_copies.h"

#include <algorithm>
#include <map>

#include "core/text_pattern.h"

namespace vmerge {
namespace {

std::string layer_prefix(const std::string& layer) { return "model.layers." + layer + "."; }

bool holds(const TensorMapping& mapping, const std::string& name) {
    return std::any_of(mapping.tensors.begin(), mapping.tensors.end(),
                       [&](const OutputTensor& t) { return t.name == name; });
}

}  // namespace

std::vector<MtpSharedCopy> set_aside_mtp_shared_copies(TensorMapping& mapping) {
    static const TextPattern enorm(R"(model\.layers\.(\d{1,6})\.enorm\.weight)");
    std::map<int64_t, std::string> layers;  // by number: "61" -> "61"
    TextMatch m;
    for (const OutputTensor& t : mapping.tensors)
        if (enorm.full_match(t.name, m)) layers.emplace(std::stoll(m[1]), std::string(m[1]));
    std::vector<MtpSharedCopy> copies;
    for (const auto& [_, layer] : layers) {
        copies.push_back({layer_prefix(layer) + "embed_tokens.weight", false, std::nullopt});
        copies.push_back({layer_prefix(layer) + "shared_head.head.weight", true, std::nullopt});
    }
    if (copies.empty()) return copies;
    std::map<std::string, MtpSharedCopy*> by_name;
    for (auto& c : copies) by_name[c.name] = &c;
    std::erase_if(mapping.tensors, [&](OutputTensor& t) {
        auto it = by_name.find(t.name);
        if (it == by_name.end()) return false;
        it->second->read = std::move(t);
        return true;
    });
    return copies;
}

std::string mtp_copy_original(const TensorMapping& mapping, const MtpSharedCopy& copy, bool tied) {
    if (copy.head && holds(mapping, kHeadName)) return kHeadName;
    // A value model's head is its score: tied or not, there is no output head to copy.
    if (copy.head && (!tied || holds(mapping, "score.weight"))) return "";
    return holds(mapping, kEmbeddingName) ? kEmbeddingName : "";
}

std::vector<std::string> add_mtp_shared_copies(TensorMapping& mapping, const std::vector<MtpSharedCopy>& copies,
                                               bool tied) {
    std::vector<std::string> notes;
    size_t added = 0;
    for (const MtpSharedCopy& copy : copies) {
        const std::string original = mtp_copy_original(mapping, copy, tied);
        if (original.empty()) {
            notes.push_back(copy.name + " not written: the output has no " + (copy.head ? kHeadName : kEmbeddingName) +
                            " to copy");
            continue;
        }
        auto from = std::find_if(mapping.tensors.begin(), mapping.tensors.end(),
                                 [&](const OutputTensor& t) { return t.name == original; });
        OutputTensor duplicate = *from;
        duplicate.name = copy.name;
        // After the last tensor of the copy's layer, so the layer stays together in the files.
        const std::string prefix = copy.name.substr(0, copy.name.find('.', std::string("model.layers.").size()) + 1);
        auto last = std::find_if(mapping.tensors.rbegin(), mapping.tensors.rend(),
                                 [&](const OutputTensor& t) { return t.name.starts_with(prefix); });
        mapping.tensors.insert(last == mapping.tensors.rend() ? mapping.tensors.end() : last.base(), std::move(duplicate));
        ++added;
    }
    if (added)
        notes.push_back(std::to_string(added) + " multi-token prediction copies of " + kEmbeddingName + " / " + kHeadName +
                        " written (embed_tokens, shared_head.head of each MTP layer, as the model's release holds them; "
                        "--no_mtp_shared_copies leaves them out)");
    return notes;
}

}  // namespace vmerge
