#include "formats/torchtitan/torchtitan_keys.h"
#include "core/text_pattern.h"


namespace vmerge {

bool is_torchtitan_model_key(const std::string& key) {
    static const TextPattern layer(R"(^layers\.\d+\.(attention|attention_norm|feed_forward|ffn_norm|moe)\..*$)");
    return key == "tok_embeddings.weight" || layer.full_match(key);
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
