// Small shared files read once (rank 0) and handed to every rank: the same config, the same
// LoRA facts, and the same error text as when every rank read the files itself.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "io/input_file.h"
#include "io/read_once.h"
#include "io/small_file.h"
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
    const std::string text = read_on_rank_zero(comm, [&] { return read_hf_config_text(dir.path()); });
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
    EXPECT_EQ(error_of([&] { read_on_rank_zero(comm, [&] { return read_hf_config_text(dir.path()); }); }), missing);
    dir.touch("config.json", "{not json");
    const std::string bad = error_of([&] { load_hf_config(dir.path()); });
    EXPECT_FALSE(bad.empty());
    const std::string text = read_on_rank_zero(comm, [&] { return read_hf_config_text(dir.path()); });
    EXPECT_EQ(error_of([&] { parse_hf_config(dir.path(), text); }), bad);
}

TEST(SharedFiles, SmallFilesRoundTrip) {
    std::vector<SmallFile> files(3);
    files[0] = {"/a", true, std::string("x\0:y", 4), ""};
    files[1] = {"/b", false, "", ""};
    files[2] = {"/c", true, "", "/c: not a regular file"};
    const auto back = deserialize_small_files(serialize_small_files(files));
    ASSERT_EQ(back.size(), 3u);
    EXPECT_EQ(back[0].text, files[0].text);
    EXPECT_TRUE(back[0].exists);
    EXPECT_FALSE(back[1].exists);
    EXPECT_EQ(error_of([&] { back[2].contents(); }), "/c: not a regular file");
    EXPECT_THROW(deserialize_small_files("9:abc"), Error);
    EXPECT_THROW(deserialize_small_files("x:abc"), Error);
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
        read_on_rank_zero(comm, [&] { return serialize_lora_metadata(read_lora_metadata(actor)); }));
    // The files are gone: the facts come from what rank 0 read.
    std::filesystem::remove(dir.path() + "/lora_train_meta.json");
    const LoraHyperparameters shared = resolve_lora_hyperparameters(o, "x");
    EXPECT_EQ(shared.alpha, direct.alpha);
    EXPECT_EQ(shared.r, direct.r);
    EXPECT_EQ(shared.source, direct.source);
    o.metadata.reset();
    EXPECT_NE(error_of([&] { resolve_lora_hyperparameters(o, "x"); }).find("pass --lora_alpha"), std::string::npos);
}

// Detection's reads on rank 0, replayed on the others: the same texts and the same errors,
// without the files being opened again.
TEST(SharedFiles, RecordedReadsAnswerTheOtherRanks) {
    TempDir dir;
    dir.touch("fsdp_config.json", R"({"world_size": 2})");
    dir.touch("big.json", std::string(100, ' '));
    const std::string config = dir.path() + "/fsdp_config.json", big = dir.path() + "/big.json";
    start_recording_reads();
    EXPECT_EQ(read_small_file(config, 1000, "a JSON file"), R"({"world_size": 2})");
    const std::string too_big = error_of([&] { read_small_file(big, 10, "a JSON file"); });
    const std::vector<SmallFile> recorded = stop_recording_reads();
    ASSERT_EQ(recorded.size(), 2u);
    ASSERT_NE(too_big.find("more than the 10 bytes"), std::string::npos);
    std::filesystem::remove(config);
    std::filesystem::remove(big);
    dir.touch("other.json", "{}");
    {
        const ReplayedReads replayed(deserialize_small_files(serialize_small_files(recorded)));
        EXPECT_EQ(read_small_file(config, 1000, "a JSON file"), R"({"world_size": 2})");  // the file is gone
        EXPECT_EQ(error_of([&] { read_small_file(big, 10, "a JSON file"); }), too_big);
        EXPECT_EQ(read_small_file(dir.path() + "/other.json", 10, "a JSON file"), "{}");  // not recorded: read
    }
    EXPECT_NE(error_of([&] { read_small_file(config, 1000, "a JSON file"); }), "");  // replay over: read again
    EXPECT_TRUE(stop_recording_reads().empty());  // nothing recorded outside a recording
}

}  // namespace
}  // namespace vmerge
