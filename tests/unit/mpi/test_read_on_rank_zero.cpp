// Small shared files read once (rank 0, mpi/read_on_rank_zero.h) and handed to every rank: the
// same config, the same LoRA facts, and the same error text as when every rank read the files itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "architecture/hf_config.h"
#include "mapping/lora_adapter.h"
#include "read_on_rank_zero.h"
#include "single_rank_comm.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::TempDir;

using testing::error_of;
TEST(SharedFiles, BroadcastConfigEqualsTheDirectRead) {
    TempDir dir;
    dir.touch("config.json", R"({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "tie_word_embeddings": true})");
    SingleRankComm comm;
    const std::string text = read_on_rank_zero(comm, "read config.json", [&] { return read_hf_config_text(dir.path()); });
    const HfConfig shared = parse_hf_config(dir.path(), text);
    const HfConfig direct = load_hf_config(dir.path());
    EXPECT_EQ(shared.json, direct.json);
    EXPECT_EQ(shared.dir, direct.dir);
    EXPECT_EQ(shared.dtype, direct.dtype);
    EXPECT_EQ(shared.tie_word_embeddings, direct.tie_word_embeddings);
    EXPECT_EQ(shared.architectures, direct.architectures);
}

TEST(SharedFiles, ErrorsKeepTheirText) {
    TempDir dir;
    SingleRankComm comm;
    const std::string missing = error_of([&] { load_hf_config(dir.path()); });
    EXPECT_NE(missing.find("cannot open the model config"), std::string::npos);
    EXPECT_EQ(error_of([&] { read_on_rank_zero(comm, "read config.json", [&] { return read_hf_config_text(dir.path()); }); }),
              "step 'read config.json' failed: " + missing);
    dir.touch("config.json", "{not json");
    const std::string bad = error_of([&] { load_hf_config(dir.path()); });
    EXPECT_FALSE(bad.empty());
    const std::string text = read_on_rank_zero(comm, "read config.json", [&] { return read_hf_config_text(dir.path()); });
    EXPECT_EQ(error_of([&] { parse_hf_config(dir.path(), text); }), bad);
}

TEST(SharedFiles, LoraMetadataFromRankZeroGivesTheSameAlpha) {
    TempDir dir;
    const std::string actor = dir.path() + "/actor";
    std::filesystem::create_directories(actor + "/lora_adapter");
    std::ofstream(dir.path() + "/lora_train_meta.json") << R"({"r": 3, "lora_alpha": 32})";
    LoraOptions o;
    o.checkpoint_dir = actor;
    const LoraHyperparameters direct = resolve_lora_hyperparameters(o, "x");
    SingleRankComm comm;
    o.metadata = deserialize_lora_metadata(
        read_on_rank_zero(comm, "read the LoRA metadata", [&] { return serialize_lora_metadata(read_lora_metadata(actor)); }));
    // The files are gone: the facts come from what rank 0 read.
    std::filesystem::remove(dir.path() + "/lora_train_meta.json");
    const LoraHyperparameters shared = resolve_lora_hyperparameters(o, "x");
    EXPECT_EQ(shared.alpha, direct.alpha);
    EXPECT_EQ(shared.r, direct.r);
    EXPECT_EQ(shared.source, direct.source);
    o.metadata.reset();
    EXPECT_NE(error_of([&] { resolve_lora_hyperparameters(o, "x"); }).find("pass --lora_alpha"), std::string::npos);
}

}  // namespace
}  // namespace vmerge
