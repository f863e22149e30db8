// Unit tests for map_fsdp / discover_fsdp / fsdp_model_name (src/formats/fsdp/fsdp_backend.h), on
// hand-built scans.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/fsdp/fsdp_backend.h"
#include "formats/source_ledger.h"
#include "core/tensor_mapping.h"
#include "test_support.h"

namespace vmerge {
namespace {

using vmerge::testing::plain;

using testing::stored;
using testing::scan_of;
namespace fs = std::filesystem;
using testing::replicate;
using testing::shard;
using testing::TempDir;
TensorRef dtensor(Shape local, const std::string& file, Shape global, Shape mesh, Shape coords,
                  std::vector<Placement> placements, DType dtype = DType::F32) {
    TensorRef t = plain(local, file, dtype);
    t.dtensor = testing::layout(std::move(global), std::move(mesh), std::move(coords), std::move(placements));
    return t;
}

ScannedFile file(const std::string& path, std::vector<StateDictEntry> entries) {
    ScannedFile f;
    f.path = path;
    f.tensors = std::move(entries);
    return f;
}

std::string rank_path(int world, int rank) {
    return "/ckpt/model_world_size_" + std::to_string(world) + "_rank_" + std::to_string(rank) + ".pt";
}

using testing::error_of;
using testing::contains;
// --- map_fsdp ----------------------------------------------------------------------------

TEST(MapFsdp, Shard0UnevenOverThreeRanks) {
    // N=10 over W=3: c=4, rows 4, 4, 2.
    std::vector<ScannedFile> files;
    const int64_t rows[] = {4, 4, 2};
    for (int r = 0; r < 3; ++r)
        files.push_back(file(rank_path(3, r),
                             {{"w", dtensor({rows[r], 5}, rank_path(3, r), {10, 5}, {3}, {r}, {shard(0)})},
                              {"b", dtensor({rows[r]}, rank_path(3, r), {10}, {3}, {r}, {shard(0)}, DType::BF16)}}));
    const TensorMapping m = map_fsdp(files);
    ASSERT_EQ(m.tensors.size(), 2u);
    const OutputTensor& w = m.tensors[0];
    EXPECT_EQ(w.name, "w");
    EXPECT_EQ(w.shape, (Shape{10, 5}));
    EXPECT_EQ(w.dtype, DType::F32);
    ASSERT_EQ(w.copies.size(), 3u);
    const int64_t starts[] = {0, 4, 8};
    for (int r = 0; r < 3; ++r) {
        const BoxCopy& c = w.copies[r];
        ASSERT_LT(c.source, m.sources.size());
        EXPECT_EQ(m.sources[c.source].storage.file, rank_path(3, r));
        EXPECT_EQ(c.src_start, (Shape{0, 0}));
        EXPECT_EQ(c.dst_start, (Shape{starts[r], 0}));
        EXPECT_EQ(c.extent, (Shape{rows[r], 5}));
    }
    const OutputTensor& b = m.tensors[1];
    EXPECT_EQ(b.name, "b");
    EXPECT_EQ(b.shape, (Shape{10}));
    EXPECT_EQ(b.dtype, DType::BF16);
    EXPECT_EQ(b.source_dtype, DType::BF16);
    ASSERT_EQ(b.copies.size(), 3u);
    EXPECT_EQ(b.copies[2].dst_start, (Shape{8}));
    EXPECT_EQ(b.copies[2].extent, (Shape{2}));
}

TEST(MapFsdp, EmptyShardGivesNoCopy) {
    // N=5 over W=4: 2, 2, 1, 0.
    std::vector<ScannedFile> files;
    const int64_t rows[] = {2, 2, 1, 0};
    for (int r = 0; r < 4; ++r)
        files.push_back(
            file(rank_path(4, r), {{"w", dtensor({rows[r], 3}, rank_path(4, r), {5, 3}, {4}, {r}, {shard(0)})}}));
    const TensorMapping m = map_fsdp(files);
    const OutputTensor& w = m.tensors[0];
    ASSERT_EQ(w.copies.size(), 3u);
    EXPECT_EQ(w.copies[0].dst_start, (Shape{0, 0}));
    EXPECT_EQ(w.copies[1].dst_start, (Shape{2, 0}));
    EXPECT_EQ(w.copies[2].dst_start, (Shape{4, 0}));
    EXPECT_EQ(w.copies[2].extent, (Shape{1, 3}));
    for (const BoxCopy& c : w.copies) EXPECT_NE(m.sources[c.source].storage.file, rank_path(4, 3));
}

TEST(MapFsdp, HsdpReplicasAreNotSources) {
    // mesh (replicate=2, shard=2); rank r has coordinates (r / 2, r % 2). N=6: 3 rows each.
    std::vector<ScannedFile> files;
    for (int r = 0; r < 4; ++r)
        files.push_back(file(rank_path(4, r), {{"w", dtensor({3, 2}, rank_path(4, r), {6, 2}, {2, 2},
                                                             {r / 2, r % 2}, {replicate(), shard(0)})}}));
    const TensorMapping m = map_fsdp(files);
    const OutputTensor& w = m.tensors[0];
    EXPECT_EQ(w.shape, (Shape{6, 2}));
    ASSERT_EQ(w.copies.size(), 2u);
    std::set<std::string> used;
    for (const BoxCopy& c : w.copies) used.insert(m.sources[c.source].storage.file);
    EXPECT_EQ(used, (std::set<std::string>{rank_path(4, 0), rank_path(4, 1)}));
    for (const TensorRef& s : m.sources) {
        EXPECT_NE(s.storage.file, rank_path(4, 2));
        EXPECT_NE(s.storage.file, rank_path(4, 3));
    }
    EXPECT_EQ(w.copies[0].dst_start, (Shape{0, 0}));
    EXPECT_EQ(w.copies[1].dst_start, (Shape{3, 0}));
}

TEST(MapFsdp, SubMeshDTensorSavedBySeveralRanksIsReadOnce) {
    // FSDP+TP on (dp=2, tp=2): rank r = dp*2 + tp. A norm weight lives on the dp mesh only,
    // so ranks (dp, tp=0) and (dp, tp=1) save the same shard with the same coordinates.
    std::vector<ScannedFile> files;
    for (int r = 0; r < 4; ++r) {
        const int64_t dp = r / 2;
        files.push_back(file(rank_path(4, r), {{"norm", dtensor({4}, rank_path(4, r), {8}, {2}, {dp}, {shard(0)})}}));
    }
    const TensorMapping m = map_fsdp(files);
    const OutputTensor& norm = m.tensors[0];
    EXPECT_EQ(norm.shape, (Shape{8}));
    ASSERT_EQ(norm.copies.size(), 2u);
    EXPECT_EQ(norm.copies[0].dst_start, (Shape{0}));
    EXPECT_EQ(norm.copies[1].dst_start, (Shape{4}));
    EXPECT_EQ(m.sources[norm.copies[0].source].storage.file, rank_path(4, 0));
    EXPECT_EQ(m.sources[norm.copies[1].source].storage.file, rank_path(4, 2));
}

TEST(MapFsdp, PlainTensorsConcatenateOnDim0) {
    std::vector<ScannedFile> files = {
        file(rank_path(3, 0), {{"buf", plain({2, 3}, rank_path(3, 0))}}),
        file(rank_path(3, 1), {{"buf", plain({3, 3}, rank_path(3, 1))}}),
        file(rank_path(3, 2), {{"buf", plain({0, 3}, rank_path(3, 2))}}),
    };
    const TensorMapping m = map_fsdp(files);
    const OutputTensor& t = m.tensors[0];
    EXPECT_EQ(t.shape, (Shape{5, 3}));
    ASSERT_EQ(t.copies.size(), 2u);
    EXPECT_EQ(t.copies[0].dst_start, (Shape{0, 0}));
    EXPECT_EQ(t.copies[0].extent, (Shape{2, 3}));
    EXPECT_EQ(m.sources[t.copies[0].source].storage.file, rank_path(3, 0));
    EXPECT_EQ(t.copies[1].dst_start, (Shape{2, 0}));
    EXPECT_EQ(t.copies[1].extent, (Shape{3, 3}));
    EXPECT_EQ(t.copies[1].src_start, (Shape{0, 0}));
    EXPECT_EQ(m.sources[t.copies[1].source].storage.file, rank_path(3, 1));
}

TEST(MapFsdp, PlainTensorsThatDoNotConcatenateAreAnError) {
    std::vector<ScannedFile> files = {
        file(rank_path(2, 0), {{"buf", plain({2, 3}, rank_path(2, 0))}}),
        file(rank_path(2, 1), {{"buf", plain({2, 4}, rank_path(2, 1))}}),
    };
    EXPECT_THROW(map_fsdp(files), Error);
    std::vector<ScannedFile> scalars = {
        file(rank_path(2, 0), {{"step", plain({}, rank_path(2, 0))}}),
        file(rank_path(2, 1), {{"step", plain({}, rank_path(2, 1))}}),
    };
    EXPECT_THROW(map_fsdp(scalars), Error);
}

TEST(MapFsdp, KeepsStateDictOrder) {
    std::vector<ScannedFile> files;
    for (int r = 0; r < 2; ++r)
        files.push_back(file(rank_path(2, r), {{"z", dtensor({1}, rank_path(2, r), {2}, {2}, {r}, {shard(0)})},
                                               {"a", dtensor({1}, rank_path(2, r), {2}, {2}, {r}, {shard(0)})},
                                               {"m", plain({1}, rank_path(2, r))}}));
    const TensorMapping m = map_fsdp(files);
    ASSERT_EQ(m.tensors.size(), 3u);
    EXPECT_EQ(m.tensors[0].name, "z");
    EXPECT_EQ(m.tensors[1].name, "a");
    EXPECT_EQ(m.tensors[2].name, "m");
}

TEST(MapFsdp, MismatchedGlobalShapesNameBothFiles) {
    std::vector<ScannedFile> files = {
        file("/a/model_world_size_2_rank_0.pt",
             {{"w", dtensor({5, 4}, "/a/model_world_size_2_rank_0.pt", {10, 4}, {2}, {0}, {shard(0)})}}),
        file("/a/model_world_size_2_rank_1.pt",
             {{"w", dtensor({6, 4}, "/a/model_world_size_2_rank_1.pt", {12, 4}, {2}, {1}, {shard(0)})}}),
    };
    const std::string msg = error_of([&] { map_fsdp(files); });
    EXPECT_TRUE(contains(msg, "/a/model_world_size_2_rank_0.pt")) << msg;
    EXPECT_TRUE(contains(msg, "/a/model_world_size_2_rank_1.pt")) << msg;
}

TEST(MapFsdp, MissingKeyNamesTheFile) {
    std::vector<ScannedFile> files = {
        file(rank_path(2, 0), {{"w", plain({1}, rank_path(2, 0))}, {"b", plain({1}, rank_path(2, 0))}}),
        file(rank_path(2, 1), {{"w", plain({1}, rank_path(2, 1))}}),
    };
    const std::string msg = error_of([&] { map_fsdp(files); });
    EXPECT_TRUE(contains(msg, rank_path(2, 1))) << msg;
    EXPECT_TRUE(contains(msg, "'b'")) << msg;

    // A key only in a later file is reported too.
    std::vector<ScannedFile> extra = {
        file(rank_path(2, 0), {{"w", plain({1}, rank_path(2, 0))}}),
        file(rank_path(2, 1), {{"w", plain({1}, rank_path(2, 1))}, {"x", plain({1}, rank_path(2, 1))}}),
    };
    const std::string msg2 = error_of([&] { map_fsdp(extra); });
    EXPECT_TRUE(contains(msg2, rank_path(2, 1))) << msg2;
    EXPECT_TRUE(contains(msg2, "'x'")) << msg2;
}

TEST(MapFsdp, DuplicateKeyIsAnError) {
    std::vector<ScannedFile> files = {
        file(rank_path(1, 0), {{"w", plain({1}, rank_path(1, 0))}, {"w", plain({1}, rank_path(1, 0))}}),
    };
    EXPECT_THROW(map_fsdp(files), Error);
}

TEST(MapFsdp, LocalShapeDisagreeingWithPlacementsIsAnError) {
    // N=10 over W=3 gives rank 2 two rows, not three.
    std::vector<ScannedFile> files;
    const int64_t rows[] = {4, 4, 3};
    for (int r = 0; r < 3; ++r)
        files.push_back(
            file(rank_path(3, r), {{"w", dtensor({rows[r], 5}, rank_path(3, r), {10, 5}, {3}, {r}, {shard(0)})}}));
    const std::string msg = error_of([&] { map_fsdp(files); });
    EXPECT_TRUE(contains(msg, rank_path(3, 2))) << msg;
    EXPECT_TRUE(contains(msg, "'w'")) << msg;
}

TEST(MapFsdp, DTypeOrKindMismatchIsAnError) {
    std::vector<ScannedFile> dtypes = {
        file(rank_path(2, 0), {{"w", dtensor({1}, rank_path(2, 0), {2}, {2}, {0}, {shard(0)}, DType::F32)}}),
        file(rank_path(2, 1), {{"w", dtensor({1}, rank_path(2, 1), {2}, {2}, {1}, {shard(0)}, DType::BF16)}}),
    };
    EXPECT_THROW(map_fsdp(dtypes), Error);
    std::vector<ScannedFile> kinds = {
        file(rank_path(2, 0), {{"w", dtensor({1}, rank_path(2, 0), {2}, {2}, {0}, {shard(0)})}}),
        file(rank_path(2, 1), {{"w", plain({1}, rank_path(2, 1))}}),
    };
    EXPECT_THROW(map_fsdp(kinds), Error);
}

TEST(MapFsdp, NoFilesIsAnError) { EXPECT_THROW(map_fsdp({}), Error); }

// --- discover_fsdp -----------------------------------------------------------------------

TEST(DiscoverFsdp, FindsEveryRankWithConfig) {
    TempDir dir;
    dir.touch("fsdp_config.json", R"({"FSDP_version": 2, "world_size": 3})");
    for (int r = 0; r < 3; ++r) dir.touch("model_world_size_3_rank_" + std::to_string(r) + ".pt");
    dir.touch("extra_state_world_size_3_rank_0.pt");
    const FsdpCheckpoint c = discover_fsdp(dir.path());
    EXPECT_EQ(c.world_size, 3);
    EXPECT_FALSE(c.world_size_inferred);
    ASSERT_EQ(c.rank_files.size(), 3u);
    for (int r = 0; r < 3; ++r)
        EXPECT_EQ(fs::path(c.rank_files[r]).filename().string(),
                  "model_world_size_3_rank_" + std::to_string(r) + ".pt");
    EXPECT_TRUE(looks_like_fsdp(dir.path()));
}

TEST(DiscoverFsdp, MissingRankFileIsNamed) {
    TempDir dir;
    dir.touch("fsdp_config.json", R"({"FSDP_version": 2, "world_size": 3})");
    dir.touch("model_world_size_3_rank_0.pt");
    dir.touch("model_world_size_3_rank_2.pt");
    const std::string msg = error_of([&] { discover_fsdp(dir.path()); });
    EXPECT_TRUE(contains(msg, "model_world_size_3_rank_1.pt")) << msg;
}

TEST(DiscoverFsdp, MissingRankFileWithoutConfigIsNamed) {
    TempDir dir;
    dir.touch("model_world_size_4_rank_0.pt");
    dir.touch("model_world_size_4_rank_1.pt");
    dir.touch("model_world_size_4_rank_3.pt");
    const std::string msg = error_of([&] { discover_fsdp(dir.path()); });
    EXPECT_TRUE(contains(msg, "model_world_size_4_rank_2.pt")) << msg;
}

TEST(DiscoverFsdp, ConfigWorldSizeDisagreeingWithFileNames) {
    TempDir dir;
    dir.touch("fsdp_config.json", R"({"FSDP_version": 2, "world_size": 4})");
    dir.touch("model_world_size_2_rank_0.pt");
    dir.touch("model_world_size_2_rank_1.pt");
    const std::string msg = error_of([&] { discover_fsdp(dir.path()); });
    EXPECT_TRUE(contains(msg, "4")) << msg;
    EXPECT_TRUE(contains(msg, "model_world_size_2")) << msg;
}

TEST(DiscoverFsdp, NoConfigInfersWorldSize) {
    TempDir dir;
    dir.touch("model_world_size_2_rank_1.pt");
    dir.touch("model_world_size_2_rank_0.pt");
    const FsdpCheckpoint c = discover_fsdp(dir.path());
    EXPECT_EQ(c.world_size, 2);
    EXPECT_TRUE(c.world_size_inferred);
    ASSERT_EQ(c.rank_files.size(), 2u);
    EXPECT_EQ(fs::path(c.rank_files[0]).filename().string(), "model_world_size_2_rank_0.pt");
    EXPECT_EQ(fs::path(c.rank_files[1]).filename().string(), "model_world_size_2_rank_1.pt");
    EXPECT_FALSE(c.notes.empty());
}

TEST(DiscoverFsdp, RankOutsideWorldSizeIsAnError) {
    TempDir dir;
    dir.touch("fsdp_config.json", R"({"world_size": 2})");
    dir.touch("model_world_size_2_rank_0.pt");
    dir.touch("model_world_size_2_rank_1.pt");
    dir.touch("model_world_size_2_rank_2.pt");
    const std::string msg = error_of([&] { discover_fsdp(dir.path()); });
    EXPECT_TRUE(contains(msg, "model_world_size_2_rank_2.pt")) << msg;
}

TEST(DiscoverFsdp, BadConfigOrNoFilesIsAnError) {
    {
        TempDir dir;
        dir.touch("fsdp_config.json", "{not json");
        dir.touch("model_world_size_1_rank_0.pt");
        const std::string msg = error_of([&] { discover_fsdp(dir.path()); });
        EXPECT_TRUE(contains(msg, "fsdp_config.json")) << msg;
    }
    {
        TempDir dir;
        EXPECT_THROW(discover_fsdp(dir.path()), Error);
        EXPECT_FALSE(looks_like_fsdp(dir.path()));
    }
    EXPECT_THROW(discover_fsdp("/nonexistent/vmerge/dir"), Error);
}

TEST(FsdpModelName, StripsWrapperSegmentsOnly) {
    EXPECT_EQ(fsdp_model_name("_fsdp_wrapped_module.model.layers.0._fsdp_wrapped_module.mlp.w"), "model.layers.0.mlp.w");
    EXPECT_EQ(fsdp_model_name("module._orig_mod.model.norm.weight"), "model.norm.weight");
    EXPECT_EQ(fsdp_model_name("model.layers.0._checkpoint_wrapped_module.mlp.w"), "model.layers.0.mlp.w");
    EXPECT_EQ(fsdp_model_name("model.my_fsdp_wrapped_module.w"), "model.my_fsdp_wrapped_module.w");  // not a segment
    EXPECT_EQ(fsdp_model_name("model.module.w"), "model.module.w");  // only a leading DDP module.
}

TEST(MapFsdp, WrapperStripCollisionIsAnError) {
    const std::string path = "/c/model_world_size_1_rank_0.pt";
    const std::vector<ScannedFile> files{scan_of(path, {{"model.w", stored({2}, path, 64), 0},
                                                        {"_fsdp_wrapped_module.model.w", stored({2}, path, 128), 0}})};
    EXPECT_EQ(error_of([&] { map_fsdp(files); }),
              path + ": keys 'model.w' and '_fsdp_wrapped_module.model.w' both become output tensor 'model.w'");
}

TEST(MapFsdp, HsdpReplicasAreDroppedInTheLedger) {
    // Mesh (2, 2) (Replicate, Shard(0)) of a [4] tensor: ranks with coordinate 1 on dim 0 repeat.
    std::vector<ScannedFile> files;
    for (int r = 0; r < 4; ++r) {
        const std::string path = "/c/model_world_size_4_rank_" + std::to_string(r) + ".pt";
        TensorRef t = stored({2}, path, 64);
        t.dtensor = testing::layout({4}, {2, 2}, {r / 2, r % 2}, {replicate(), shard(0)});
        files.push_back(scan_of(path, {{"w", t, 0}}));
    }
    SourceLedger ledger(files);
    const TensorMapping m = map_fsdp(files, &ledger);
    const SourceAccount account = ledger.settle(m);
    EXPECT_EQ(account.written, 2u);
    EXPECT_EQ(account.dropped.at("replica (other DP/EP/TP rank)"), 2u);
}

}  // namespace
}  // namespace vmerge
