#include "formats/torchtitan/torchtitan_keys.h"

#include <regex>

namespace vmerge {

bool is_torchtitan_model_key(const std::string& key) {
    static const std::regex layer(R"(^layers\.\d+\.(attention|attention_norm|feed_forward|ffn_norm|moe)\..*$)");
    return key == "tok_embeddings.weight" || std::regex_match(key, layer);
}

std::string first_torchtitan_key(const DcpMetadata& meta) {
    for (const auto& t : meta.tensors)
        if (is_torchtitan_model_key(t.fqn)) return t.fqn;
    return "";
}

bool is_torchtitan_training_state(const std::string& key) {
    for (const char* container : {"optimizer.", "lr_scheduler.", "dataloader.", "train_state."})
        if (key.starts_with(container)) return true;
    return false;
}

}  // namespace vmerge
