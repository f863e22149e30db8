#include <gtest/gtest.h>

#include "vmerge/checkpoint.h"
#include "vmerge/error.h"

namespace vmerge {
namespace {

ScannedFile plain_rank_file(const std::string& path, const std::vector<std::string>& keys) {
    ScannedFile file;
    file.path = path;
    for (const auto& key : keys) {
        TensorRef t;
        t.dtype = DType::F32;
        t.shape = {2, 4};
        t.stride = {4, 1};
        t.storage = {path, "data/0", 0, 32};
        file.tensors.push_back({key, t, 0});
    }
    return file;
}

TEST(LoraRefusal, PeftWrappedFsdpStateDictIsAnErrorNotASilentlyWrongModel) {
    DetectedCheckpoint ckpt;
    ckpt.layout = Layout::Fsdp;
    ckpt.fsdp.dir = "/ckpt/actor";
    ckpt.fsdp.world_size = 1;
    const std::vector<std::string> keys{
        "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight"};
    HfConfig config;
    config.dir = "/ckpt/actor/huggingface";
    try {
        map_checkpoint(ckpt, {plain_rank_file("/ckpt/actor/model_world_size_1_rank_0.pt", keys)}, config, {});
        FAIL() << "a LoRA checkpoint was mapped";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("/ckpt/actor"), std::string::npos) << what;
        EXPECT_NE(what.find("LoRA"), std::string::npos) << what;
    }
}

TEST(LoraRefusal, OrdinaryNamesMap) {
    DetectedCheckpoint ckpt;
    ckpt.layout = Layout::Fsdp;
    ckpt.fsdp.world_size = 1;
    HfConfig config;
    const auto mapped = map_checkpoint(
        ckpt, {plain_rank_file("/r0.pt", {"model.layers.0.self_attn.q_proj.weight"})}, config, {});
    ASSERT_EQ(mapped.mapping.tensors.size(), 1u);
    EXPECT_EQ(mapped.mapping.tensors[0].name, "model.layers.0.self_attn.q_proj.weight");
}

}  // namespace
}  // namespace vmerge
