// Unit tests for the backend registry (src/formats/registry.h): the --backend values and
// help, the auto-detection order, each layout detecting its folders, and the messages when
// none does.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/registry.h"
#include "hdf5/archive_layout.h"
#include "output/hdf5/archive_writer.h"
#include "test_support.h"

namespace vmerge {
namespace {
namespace fs = std::filesystem;

const std::string kFixtures = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2";

using testing::error_of;
using testing::contains;
std::string layout_of(const std::string& dir, const std::string& backend = kAutoBackend) {
    const DetectedCheckpoint d = detect_checkpoint(dir, backend);
    return d.source ? d.source->name() : "";
}

// A file (and its folders) under `root`.
void make_file(const std::string& root, const std::string& relative) {
    const fs::path p = fs::path(root) / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "x";
}

TEST(BackendRegistry, ValuesAndHelpComeFromTheList) {
    EXPECT_EQ(backend_values(), (std::vector<std::string>{"auto", "fsdp", "megatron", "torchtitan", "dcp", "deepspeed", "hdf5"}));
    EXPECT_EQ(backend_values_text(), "auto, fsdp, megatron, torchtitan, dcp, deepspeed or hdf5");
    EXPECT_EQ(backend_help(),
              "auto | fsdp | megatron | torchtitan | dcp | deepspeed (DeepSpeed ZeRO 1/2/3: a folder with latest, or its tag folder) | "
              "hdf5 (a model.h5 archive: merge it back, inspect it)");
    for (const auto& value : backend_values()) EXPECT_TRUE(is_backend_value(value)) << value;
    EXPECT_FALSE(is_backend_value("torch_dist"));  // a layout, not a --backend value
}

// The HDF5 target adds --backend hdf5 at start-up (vmerge_core names no archive): the last choice,
// never auto-detected, refusing what an archive cannot give; the others refuse nothing.
TEST(BackendRegistry, TheHdf5TargetRegistersTheArchive) {
    const BackendChoice& last = backend_choices().back();
    EXPECT_EQ(last.name, "hdf5");
    ASSERT_EQ(last.layouts.size(), 1u);
    EXPECT_EQ(last.layouts[0]->name(), "hdf5_archive");
    EXPECT_TRUE(last.layouts[0]->as_stored());
    for (const auto& choice : backend_choices()) EXPECT_EQ(choice.auto_detected, &choice != &last) << choice.name;
    EXPECT_THROW(add_backend_choice({"hdf5", "", "", {}}), Error);
    const CheckpointRequest merge{"hdf5", "merge", "safetensors", "safetensors", "auto", false, {"local_dir"}};
    EXPECT_EQ(refuse_request(merge), "");
    CheckpointRequest r = merge;
    r.format = "hdf5";
    EXPECT_EQ(refuse_request(r), "--backend hdf5 reads an archive; its output is a safetensors folder (drop --format hdf5)");
    r = merge;
    r.dtype = "bf16";
    EXPECT_EQ(refuse_request(r), "--backend hdf5 writes the archive's tensors as stored; --dtype bf16 applies to checkpoints");
    // A flag that would change a checkpoint's tensors or config.json, or resume, is never ignored.
    for (const char* flag : {"hf_config", "resume", "merge_lora", "tie_word_embedding"}) {
        r = merge;
        r.given.push_back(flag);
        EXPECT_EQ(refuse_request(r), "--backend hdf5 writes the archive's tensors and files as stored, in one pass; --" +
                                         std::string(flag) + " applies to checkpoints");
    }
    for (const auto& value : backend_values()) {
        if (value == "hdf5") continue;
        r.backend = value;
        EXPECT_EQ(refuse_request(r), "") << value;
    }
}

TEST(BackendRegistry, AutoDetectionOrderIsListOrder) {
    std::vector<std::string> layouts;
    for (const auto& choice : backend_choices())
        for (const Backend* layout : choice.layouts) layouts.push_back(choice.name + "/" + layout->name());
    EXPECT_EQ(layouts, (std::vector<std::string>{"fsdp/fsdp", "megatron/verl_v2", "megatron/megatron_adapter",
                                                 "megatron/torch_dist", "megatron/megatron_legacy",
                                                 "megatron/hf_safetensors", "torchtitan/torchtitan", "dcp/dcp", "deepspeed/deepspeed",
                                                 "hdf5/hdf5_archive"}));
    EXPECT_EQ(find_layout("torch_dist"), backend_choices()[1].layouts[2]);
    EXPECT_EQ(find_layout("nonsense"), nullptr);
}

TEST(BackendRegistry, EachLayoutDetectsItsFixtures) {
    EXPECT_EQ(layout_of(kFixtures + "/fsdp2_w2"), "fsdp");
    EXPECT_EQ(layout_of(kFixtures + "/fsdp2_w2", "fsdp"), "fsdp");
    EXPECT_EQ(layout_of(kFixtures + "/fsdp2_w2_dcp"), "dcp");
    EXPECT_EQ(layout_of(kFixtures + "/fsdp2_w2_dcp", "dcp"), "dcp");
    const DetectedCheckpoint fsdp = detect_checkpoint(kFixtures + "/fsdp2_w2", "auto");
    EXPECT_EQ(fsdp.backend, "fsdp");
    EXPECT_EQ(fsdp.jobs.size(), 2u);
    EXPECT_EQ(fsdp.default_hf_dir, kFixtures + "/fsdp2_w2/huggingface");

    testing::TempDir legacy, adapter, hf, archive;
    make_file(legacy.path(), "model/mp_rank_00/model.pt");
    make_file(adapter.path(), "adapter_checkpoint/mp_rank_00_adapter.pt");
    make_file(adapter.path(), "model/mp_rank_00/model.pt");  // the adapter wins: it is tried first
    make_file(hf.path(), "huggingface/model.safetensors");
    {  // an archive of one tensor: detection opens it
        const std::vector<OutputTensor> tensors = {testing::tensor("model.norm.weight", DType::F32, {2})};
        const float values[2] = {1, 2};
        ArchiveWriter writer(archive.path() + "/" + kArchiveFileName, tensors, {0}, 0);
        writer.write_rows(0, 0, 2, values);
        writer.write_index({8, {"model.norm.weight"}, "none"});
        writer.close();
    }
    EXPECT_EQ(layout_of(legacy.path()), "megatron_legacy");
    EXPECT_EQ(layout_of(legacy.path(), "megatron"), "megatron_legacy");
    EXPECT_EQ(layout_of(adapter.path()), "megatron_adapter");
    EXPECT_EQ(layout_of(hf.path()), "hf_safetensors");
    EXPECT_EQ(detect_checkpoint(hf.path(), "auto").backend, "megatron");
    EXPECT_EQ(layout_of(archive.path(), "hdf5"), "hdf5_archive");
    const DetectedCheckpoint stored = detect_checkpoint(archive.path(), "hdf5");
    EXPECT_TRUE(stored.jobs.empty());
    EXPECT_TRUE(source_opener(stored));  // its datasets are read through the archive
    EXPECT_EQ(checkpoint_hf_files(stored).size(), 0u);
    EXPECT_FALSE(source_opener(fsdp));  // files, read with pread
}

// The layout flags given, as the command line hands them on.
BackendFlags flags_of(std::initializer_list<std::pair<std::string, std::string>> given) {
    BackendFlags flags;
    for (const auto& [name, value] : given) flags.set(name, value);
    return flags;
}

TEST(BackendRegistry, LayoutFlagsAreReadOrRefused) {
    // A flag that names a step is never ignored: FSDP has no iterations and no tags.
    const std::string fsdp = kFixtures + "/fsdp2_w2";
    const std::string no_iterations = error_of([&] { detect_checkpoint(fsdp, "auto", {}, flags_of({{"iteration", "2"}})); });
    EXPECT_TRUE(testing::contains(no_iterations, "--iteration 2: " + fsdp + " was read as ")) << no_iterations;
    EXPECT_TRUE(testing::contains(no_iterations, "which has no iterations to choose from")) << no_iterations;
    const std::string no_tags = error_of([&] { detect_checkpoint(fsdp, "fsdp", {}, flags_of({{"tag", "global_step2"}})); });
    EXPECT_TRUE(testing::contains(no_tags, "--tag global_step2: ")) << no_tags;
    // A switch is named without a value; the flag's own reason follows.
    const std::string no_frozen =
        error_of([&] { detect_checkpoint(fsdp, "auto", {}, flags_of({{"exclude_frozen_parameters", ""}})); });
    EXPECT_TRUE(testing::contains(no_frozen, "--exclude_frozen_parameters: " + fsdp + " was read as verl FSDP")) << no_frozen;
    EXPECT_TRUE(testing::contains(no_frozen, "which records no frozen parameters")) << no_frozen;
    // A layout that reads the flag keeps it for its mapping.
    const DetectedCheckpoint with_base = detect_checkpoint(fsdp, "auto", {}, flags_of({{"lora_base", "/base"}}));
    EXPECT_EQ(with_base.flags.text("lora_base"), "/base");
    // On a verl run folder --iteration N is --step N.
    testing::TempDir run;
    for (const char* step : {"global_step_1", "global_step_2"}) {
        std::filesystem::create_directories(run.path() + "/" + step);
        std::filesystem::copy(fsdp, run.path() + "/" + step + "/actor", std::filesystem::copy_options::recursive);
    }
    run.touch("latest_checkpointed_iteration.txt", "1");
    const DetectedCheckpoint second = detect_checkpoint(run.path(), "auto", {}, flags_of({{"iteration", "2"}}));
    EXPECT_EQ(second.dir, run.path() + "/global_step_2/actor");
    EXPECT_FALSE(second.flags.given("iteration"));
    LevelChoice step_one;
    step_one.step = 1;
    EXPECT_TRUE(testing::contains(
        error_of([&] { detect_checkpoint(run.path(), "auto", step_one, flags_of({{"iteration", "2"}})); }), "name two steps"));
}

// Every layout flag is defined once, and the registry lists each a layout reads.
TEST(BackendRegistry, LayoutFlagsComeFromTheLayouts) {
    std::set<std::string> names;
    for (const BackendFlag* flag : backend_flags()) {
        EXPECT_TRUE(names.insert(flag->name).second) << flag->name;
        EXPECT_FALSE(flag->help.empty()) << flag->name;
        EXPECT_FALSE(flag->refusal.empty()) << flag->name;
    }
    for (const char* name : {"iteration", "tag", "lora_base", "exclude_frozen_parameters", "allow_incomplete"})
        EXPECT_TRUE(names.count(name)) << name;
}

TEST(BackendRegistry, TorchDistWithoutModelTensorsIsPassedOver) {
    // A dist_ckpt/ holding only optimizer state (verl >= 0.7): here a plain DCP folder's files.
    testing::TempDir dir;
    fs::copy(kFixtures + "/fsdp2_w2_dcp", dir.path() + "/dist_ckpt");
    make_file(dir.path(), "dist_ckpt/metadata.json");
    const std::string msg = error_of([&] { detect_checkpoint(dir.path(), "auto"); });
    EXPECT_TRUE(contains(msg, "megatron: no ckpt_contents.json or model/dist_ckpt/, no adapter_checkpoint/, " + dir.path() + "/dist_ckpt holds no model tensors, ")) << msg;
}

TEST(BackendRegistry, CannotTellListsWhatEveryBackendLookedFor) {
    testing::TempDir empty;
    const std::string msg = error_of([&] { detect_checkpoint(empty.path(), "auto"); });
    EXPECT_EQ(msg, empty.path() +
                       ": cannot tell the checkpoint kind: fsdp: no model_world_size_*_rank_*.pt; megatron: no "
                       "ckpt_contents.json or model/dist_ckpt/, no adapter_checkpoint/, no dist_ckpt/ or metadata.json with .metadata, no mp_rank_* folders, no "
                       "latest_checkpointed_iteration.txt, no *.safetensors in huggingface/; torchtitan: no step-N/.metadata; dcp: no .metadata; deepspeed: no "
                       "latest file or *_optim_states.pt; pass --backend to name it (fsdp, megatron, torchtitan, dcp, deepspeed, hdf5)");
    // The old message's parts are all still there.
    for (const char* part : {"no model_world_size_*_rank_*.pt", "no mp_rank_* folders", "dist_ckpt/",
                             "latest_checkpointed_iteration.txt", "no .metadata"})
        EXPECT_TRUE(contains(msg, part)) << part;
    // A model.h5 alone is not auto-detected: --backend hdf5 names it.
    make_file(empty.path(), "model.h5");
    EXPECT_TRUE(contains(error_of([&] { detect_checkpoint(empty.path(), "auto"); }), "cannot tell"));
}

TEST(BackendRegistry, ForcedBackendMissesKeepTheirMessages) {
    testing::TempDir empty;
    const std::string& d = empty.path();
    EXPECT_EQ(error_of([&] { detect_checkpoint(d, "fsdp"); }),
              d + ": no model_world_size_*_rank_*.pt files (--backend fsdp)");
    EXPECT_EQ(error_of([&] { detect_checkpoint(d, "megatron"); }),
              d + ": no Megatron checkpoint (no mp_rank_* folders, no dist_ckpt/ or metadata.json, "
                  "no latest_checkpointed_iteration.txt)");
    EXPECT_EQ(error_of([&] { detect_checkpoint(d, "dcp"); }),
              d + "/.metadata: missing (--backend dcp needs a torch.distributed.checkpoint folder)");
    // A forced backend looks only at its own layouts.
    EXPECT_EQ(error_of([&] { detect_checkpoint(kFixtures + "/fsdp2_w2_dcp", "fsdp"); }),
              kFixtures + "/fsdp2_w2_dcp: no model_world_size_*_rank_*.pt files (--backend fsdp)");
    EXPECT_EQ(error_of([&] { detect_checkpoint(d + "/none", "auto"); }),
              d + "/none: does not exist (--local_dir: the checkpoint folder)");
}

}  // namespace
}  // namespace vmerge
