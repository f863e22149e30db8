// The FSDP side of the routed merge (src/formats/fsdp/fsdp_routing.h): which rank files may be
// routed, the verdict over all of them, and the skeleton a merge plans from; on hand-built scans.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/fsdp/fsdp_backend.h"
#include "formats/fsdp/fsdp_routing.h"
#include "test_support.h"
#include "torch/dtensor_placement.h"

namespace vmerge {
namespace {

using testing::contains;
using testing::replicate;
using testing::shard;

std::string rank_path(int world, int rank) {
    return "/ckpt/model_world_size_" + std::to_string(world) + "_rank_" + std::to_string(rank) + ".pt";
}

// Rank `rank`'s shard of a Shard(0) DTensor of `global` over a 1-D mesh of `world` ranks, in its
// own record at `offset`.
StateDictEntry shard0(const std::string& key, Shape global, int world, int rank, uint64_t offset,
                      DType dtype = DType::F32) {
    const auto [start, rows] = chunk_range(global[0], world, rank);
    (void)start;
    Shape local = global;
    local[0] = rows;
    StateDictEntry e;
    e.key = key;
    e.tensor = testing::stored(local, rank_path(world, rank), offset);
    e.tensor.dtype = dtype;
    e.tensor.dtensor = testing::layout(global, {world}, {rank}, {shard(0)});
    return e;
}

// A dense FSDP2 save of W ranks: w [10, 5] and b [N] (N = 2: rank 2 of 3 holds an empty shard).
std::vector<ScannedFile> dense_save(int world, int64_t bias_rows = 10) {
    std::vector<ScannedFile> files;
    for (int r = 0; r < world; ++r)
        files.push_back(testing::scan_of(rank_path(world, r), {shard0("w", {10, 5}, world, r, 64),
                                                               shard0("b", {bias_rows}, world, r, 512, DType::BF16)}));
    return files;
}

std::vector<FsdpFileCheck> checks_of(const std::vector<ScannedFile>& files) {
    std::vector<FsdpFileCheck> checks;
    for (size_t i = 0; i < files.size(); ++i) checks.push_back(check_fsdp_file(files[i], i, files[0], files.size()));
    return checks;
}

TEST(FsdpRouting, ADenseShard0SaveIsRoutableEachFileAtItsOwnPosition) {
    const auto files = dense_save(3);
    const auto checks = checks_of(files);
    for (size_t i = 0; i < checks.size(); ++i) {
        EXPECT_EQ(checks[i].unroutable, "");
        EXPECT_EQ(checks[i].position, (Shape{static_cast<int64_t>(i)}));
        EXPECT_EQ(checks[i].entries, 2u);
    }
    EXPECT_NE(checks[0].scan_digest, checks[1].scan_digest);
    EXPECT_EQ(routing_verdict(checks, 3), "");
}

TEST(FsdpRouting, EmptyShardsAreCountedWithTheirPlaces) {
    const auto checks = checks_of(dense_save(3, 2));  // b: rows 1, 1, 0
    EXPECT_EQ(checks[2].empty_shards, 1u);
    EXPECT_EQ(checks[2].empty_examples, (std::vector<std::string>{rank_path(3, 2) + " key 'b'"}));
    EXPECT_EQ(checks[0].empty_shards, 0u);
}

TEST(FsdpRouting, TheChecksTravelAsTheyWere) {
    const auto checks = checks_of(dense_save(3, 2));
    const auto back = deserialize_file_checks(serialize_file_checks(checks));
    ASSERT_EQ(back.size(), 3u);
    EXPECT_EQ(back[2].file, 2u);
    EXPECT_EQ(back[2].position, (Shape{2}));
    EXPECT_EQ(back[2].empty_examples, checks[2].empty_examples);
    EXPECT_EQ(back[1].scan_digest, checks[1].scan_digest);
    EXPECT_TRUE(contains(testing::error_of([] { deserialize_file_checks("[{\"file\": 1}]"); }), "internal: malformed"));
}

TEST(FsdpRouting, WhatTheAllGatherPathMustCheckIsNotRoutable) {
    auto other_dtype = dense_save(2);
    other_dtype[1].tensors[1].tensor.dtype = DType::F32;
    auto other_shape = dense_save(2);
    other_shape[1].tensors[0].tensor.dtensor->global_shape = {11, 5};
    auto missing = dense_save(2);
    missing[1].tensors.pop_back();
    auto twice = dense_save(2);
    twice[1].tensors[1].key = "w";
    auto plain = dense_save(2);
    plain[1].tensors[1].tensor.dtensor.reset();
    auto not_a_tensor = dense_save(2);
    not_a_tensor[1].skipped.push_back({"step", "int"});
    auto wrong_local = dense_save(2);
    wrong_local[1].tensors[0].tensor.shape = {4, 5};
    for (const auto& [name, files, why] :
         std::vector<std::tuple<std::string, std::vector<ScannedFile>, std::string>>{
             {"dtype", other_dtype, "dtype"},
             {"shape", other_shape, "global shape"},
             {"missing", missing, "number of keys"},
             {"twice", twice, "appears twice"},
             {"plain", plain, "plain tensor"},
             {"skipped", not_a_tensor, "not tensors"},
             {"local shape", wrong_local, "local shard is [4, 5]"}}) {
        const auto checks = checks_of(files);
        EXPECT_EQ(checks[0].unroutable, "") << name;
        EXPECT_TRUE(contains(checks[1].unroutable, rank_path(2, 1)) && contains(checks[1].unroutable, why))
            << name << ": " << checks[1].unroutable;
        EXPECT_EQ(routing_verdict(checks, 2), checks[1].unroutable) << name;
    }
}

TEST(FsdpRouting, ReplicasAreLeftToTheAllGatherPath) {
    // HSDP: replicated over a mesh dim of 2.
    std::vector<ScannedFile> hsdp;
    for (int r = 0; r < 4; ++r) {
        StateDictEntry e = shard0("w", {10, 5}, 2, r % 2, 64);
        e.tensor.storage.file = rank_path(4, r);
        e.tensor.dtensor = testing::layout({10, 5}, {2, 2}, {r / 2, r % 2}, {replicate(), shard(0)});
        hsdp.push_back(testing::scan_of(rank_path(4, r), {e}));
    }
    EXPECT_TRUE(contains(routing_verdict(checks_of(hsdp), 4), "replicated over a mesh dim"));
    // A sub-mesh (FSDP+TP norms on the dp mesh only) is smaller than the world.
    auto sub = dense_save(2);
    for (auto& f : sub) f.tensors[0].tensor.dtensor->mesh_shape = {1};
    EXPECT_TRUE(contains(routing_verdict(checks_of(sub), 2), "not the whole world"));
    // Two files at one shard position.
    auto same = dense_save(2);
    same[1] = dense_save(2)[0];
    same[1].path = rank_path(2, 1);
    for (auto& e : same[1].tensors) e.tensor.storage.file = rank_path(2, 1);
    EXPECT_TRUE(contains(routing_verdict(checks_of(same), 2), "two files hold shard position [0]"));
}

TEST(FsdpRouting, TheSkeletonHoldsEveryKeyWholeAndSaysWhichItIs) {
    const auto files = dense_save(3);
    const ScannedFile skeleton = fsdp_skeleton_scan(files[0]);
    ASSERT_EQ(skeleton.tensors.size(), 2u);
    EXPECT_EQ(skeleton.path, files[0].path);
    EXPECT_EQ(skeleton.tensors[0].key, "w");
    EXPECT_EQ(skeleton.tensors[0].tensor.shape, (Shape{10, 5}));
    EXPECT_EQ(skeleton.tensors[1].tensor.shape, (Shape{10}));
    EXPECT_EQ(skeleton.tensors[1].tensor.dtype, DType::BF16);
    EXPECT_FALSE(skeleton.tensors[1].tensor.dtensor);
    EXPECT_EQ(skeleton_key(skeleton.tensors[1].tensor), 1u);
    // map_fsdp over it gives the output tensors map_fsdp over every file gives.
    const TensorMapping whole = map_fsdp({skeleton});
    const TensorMapping full = map_fsdp(files);
    ASSERT_EQ(whole.tensors.size(), full.tensors.size());
    for (size_t i = 0; i < whole.tensors.size(); ++i) {
        EXPECT_EQ(whole.tensors[i].name, full.tensors[i].name);
        EXPECT_EQ(whole.tensors[i].shape, full.tensors[i].shape);
        EXPECT_EQ(whole.tensors[i].dtype, full.tensors[i].dtype);
    }
    EXPECT_EQ(skeleton_unroutable(whole, files[0]), "");
}

TEST(FsdpRouting, ASkeletonMappingThatDropsOrRereadsAKeyIsNotRoutable) {
    const auto files = dense_save(2);
    const ScannedFile skeleton = fsdp_skeleton_scan(files[0]);
    TensorMapping dropped = map_fsdp({skeleton});
    dropped.tensors.pop_back();
    EXPECT_TRUE(contains(skeleton_unroutable(dropped, files[0]), "key 'b' is not read exactly once"));
    TensorMapping twice = map_fsdp({skeleton});
    twice.tensors.push_back(twice.tensors[0]);
    EXPECT_TRUE(contains(skeleton_unroutable(twice, files[0]), "key 'w'"));
    TensorMapping base = map_fsdp({skeleton});
    base.sources[0].storage.file = "/hf/model.safetensors";
    EXPECT_TRUE(contains(skeleton_unroutable(base, files[0]), "outside the rank files"));
    TensorMapping lora = map_fsdp({skeleton});
    lora.lora_deltas.emplace_back();
    EXPECT_EQ(skeleton_unroutable(lora, files[0]), "a LoRA merge");
}

// A fused [E, ...] tensor split into per-expert outputs reads views of its key: the shards'
// global boxes do not meet the views' coordinates, so such a save takes the all-gather (the
// ecosystem family cases qwen3_moe_fused and qwen3_next failed in compose before this check).
TEST(FsdpRouting, ASkeletonReadingAViewOfAKeyIsNotRoutable) {
    const auto files = dense_save(2);
    const ScannedFile skeleton = fsdp_skeleton_scan(files[0]);
    TensorMapping offset = map_fsdp({skeleton});
    offset.sources[0].storage_offset = 4;
    EXPECT_TRUE(contains(skeleton_unroutable(offset, files[0]), "is read as a view, not whole"));
    TensorMapping narrower = map_fsdp({skeleton});
    narrower.sources[0].shape[0] -= 1;
    EXPECT_TRUE(contains(skeleton_unroutable(narrower, files[0]), "is read as a view, not whole"));
}

}  // namespace
}  // namespace vmerge
