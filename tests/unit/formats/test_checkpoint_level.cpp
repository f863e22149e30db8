// Unit tests for the verl folder levels (src/formats/checkpoint_level.h) and the layout v2
// manifest parser (src/formats/verl_v2/verl_manifest.h). The folders are fake listings: the
// expected folder follows from verl's layout (run/global_step_N/role), written out by hand.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "core/error.h"
#include "formats/checkpoint_level.h"
#include "formats/verl_v2/verl_manifest.h"

namespace vmerge {
namespace {

// A fake file system: folder -> listing; unknown folders are empty.
FolderLister fake(std::map<std::string, FolderListing> folders) {
    return [folders](const std::string& dir) {
        auto it = folders.find(dir);
        return it == folders.end() ? FolderListing{true, {}, std::nullopt} : it->second;
    };
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const FolderLister kRun = fake({
    {"run", {true, {"global_step_10", "global_step_20"}, "20"}},
    {"run/global_step_20", {true, {"actor"}, std::nullopt}},
    {"run/global_step_10", {true, {"actor", "critic"}, std::nullopt}},
    {"run/global_step_20/actor", {true, {"extra", "model", "optimizer"}, std::nullopt}},
});

TEST(CheckpointLevel, RunFolderFollowsTheTrackerThenTheOnlyRole) {
    const CheckpointLevel level = resolve_checkpoint_level("run", std::nullopt, "", kRun);
    EXPECT_EQ(level.dir, "run/global_step_20/actor");
    ASSERT_EQ(level.steps.size(), 2u);
    EXPECT_TRUE(contains(level.steps[0], "step 20"));
}

TEST(CheckpointLevel, StepChoosesAnotherStepAndRoleChoosesBetweenTwo) {
    EXPECT_EQ(resolve_checkpoint_level("run", 10, "critic", kRun).dir, "run/global_step_10/critic");
    EXPECT_EQ(resolve_checkpoint_level("run/global_step_10", std::nullopt, "actor", kRun).dir,
              "run/global_step_10/actor");
}

TEST(CheckpointLevel, TwoRolesWithoutRoleIsAnErrorNamingBoth) {
    const std::string e = error_of([] { resolve_checkpoint_level("run", 10, "", kRun); });
    EXPECT_TRUE(contains(e, "actor/, critic/")) << e;
    EXPECT_TRUE(contains(e, "--role")) << e;
}

TEST(CheckpointLevel, RoleFolderAndOtherFoldersAreTakenAsTheyAre) {
    const CheckpointLevel level = resolve_checkpoint_level("run/global_step_20/actor", std::nullopt, "", kRun);
    EXPECT_EQ(level.dir, "run/global_step_20/actor");
    EXPECT_TRUE(level.steps.empty());
    // Megatron-LM: a tracker beside iter_* folders is the Megatron backends' to follow.
    const FolderLister mlm = fake({{"ckpt", {true, {"iter_0000020"}, "20"}}});
    EXPECT_EQ(resolve_checkpoint_level("ckpt", std::nullopt, "", mlm).dir, "ckpt");
}

TEST(CheckpointLevel, MisplacedChoicesAndBrokenTrackersAreErrors) {
    EXPECT_TRUE(contains(error_of([] { resolve_checkpoint_level("run", 30, "", kRun); }), "global_step_30: missing"));
    EXPECT_TRUE(contains(error_of([] { resolve_checkpoint_level("run/global_step_20/actor", 20, "", kRun); }),
                         "not a verl run folder"));
    EXPECT_TRUE(contains(error_of([] { resolve_checkpoint_level("run", std::nullopt, "critic", kRun); }),
                         "has no critic/"));
    const FolderLister bad = fake({{"r", {true, {"global_step_1"}, "one"}}, {"n", {true, {"global_step_1"}, std::nullopt}}});
    EXPECT_TRUE(contains(error_of([&] { resolve_checkpoint_level("r", std::nullopt, "", bad); }), "found 'one'"));
    EXPECT_TRUE(contains(error_of([&] { resolve_checkpoint_level("n", std::nullopt, "", bad); }), "--step N"));
}

nlohmann::json manifest(nlohmann::json contents) {
    return {{"schema_version", 2}, {"role", "actor"}, {"backend", {{"use_dist_checkpointing", true}, {"peft", false}}},
            {"contents", contents}};
}

TEST(VerlManifest, ReadsTheModelSlotAndWhereTheConfigIs) {
    const VerlManifest m = parse_verl_manifest(
        manifest({{"model", {{"path", "model/huggingface"}, {"format", "huggingface"},
                             {"peft_adapter_path", "model/huggingface/adapter"}}},
                  {"hf_config", {{"path", "model/huggingface"}, {"format", "huggingface"}}},
                  {"hf_model", {{"path", "model/huggingface"}, {"format", "huggingface"}, {"note", {"a tuple"}}}}}),
        "m.json");
    EXPECT_EQ(m.schema_version, 2);
    ASSERT_TRUE(m.model && m.hf_config);
    EXPECT_EQ(m.model->format, "huggingface");
    EXPECT_EQ(m.model->peft_adapter_path, "model/huggingface/adapter");
    EXPECT_FALSE(m.tokenizer);
    EXPECT_TRUE(m.use_dist_checkpointing);
}

TEST(VerlManifest, RefusesPathsOutsideTheFolderAndUnknownModelFormats) {
    EXPECT_TRUE(contains(error_of([] {
                             parse_verl_manifest(manifest({{"model", {{"path", "../x"}, {"format", "huggingface"}}}}),
                                                 "m.json");
                         }),
                         "inside the checkpoint folder"));
    EXPECT_TRUE(contains(error_of([] {
                             parse_verl_manifest(manifest({{"model", {{"path", "m"}, {"format", "json"}}}}), "m.json");
                         }),
                         "format 'json'"));
    EXPECT_TRUE(contains(error_of([] { parse_verl_manifest(nlohmann::json{{"contents", {}}}, "m.json"); }),
                         "schema_version"));
}

}  // namespace
}  // namespace vmerge
