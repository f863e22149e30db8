// The routed FSDP merge (mpi/fsdp_shard_routing.h, mpi/routed_fsdp_merge.h) against map_fsdp over
// every file, the all-gather's mapping: each rank receives exactly the records storage_readers
// gives its rows there, and composes, for each of its rows, the copies that mapping has. With
// every rank worked out in one process, and with 1-4 ranks as threads (the whole exchange).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/human_units.h"
#include "formats/fsdp/fsdp_backend.h"
#include "formats/fsdp/fsdp_routing.h"
#include "fsdp_shard_routing.h"
#include "output/safetensors/safetensors_layout.h"
#include "plan/rank_inputs.h"
#include "plan/rank_work.h"
#include "routed_fsdp_merge.h"
#include "scan_routing.h"
#include "single_rank_comm.h"
#include "test_support.h"
#include "threaded_ranks.h"
#include "torch/dtensor_placement.h"

namespace vmerge {
namespace {

using testing::shard;

std::string rank_path(int world, int rank) {
    return "/ckpt/model_world_size_" + std::to_string(world) + "_rank_" + std::to_string(rank) + ".pt";
}

StateDictEntry dtensor_entry(const std::string& key, Shape global, int world, int rank, uint64_t offset, int64_t dim) {
    const int64_t held = chunk_range(global[dim], world, rank).second;
    Shape local = global;
    local[dim] = held;
    StateDictEntry e;
    e.key = key;
    e.tensor = testing::stored(local, rank_path(world, rank), offset);
    e.tensor.dtensor = testing::layout(global, {world}, {rank}, {shard(dim)});
    return e;
}

// W rank files: w [10, 5] and b [3] on dim 0 (b's last shards empty at W > 3), c [4, 6] on dim 1
// (every rank holds a column block of every row).
std::vector<ScannedFile> save(int world) {
    std::vector<ScannedFile> files;
    for (int r = 0; r < world; ++r)
        files.push_back(testing::scan_of(rank_path(world, r), {dtensor_entry("w", {10, 5}, world, r, 64, 0),
                                                               dtensor_entry("b", {3}, world, r, 512, 0),
                                                               dtensor_entry("c", {4, 6}, world, r, 1024, 1)}));
    return files;
}

// A copy cut to a task's rows, named by its record: what the executor reads and writes for them.
using Piece = std::tuple<std::string, uint64_t, Shape, Shape, Shape>;

std::set<Piece> pieces_of(const TensorMapping& m, const WriteTask& task) {
    std::set<Piece> pieces;
    const OutputTensor& t = m.tensors[task.tensor];
    for (const BoxCopy& c : t.copies) {
        if (numel(c.extent) == 0 || !feeds_rows(t, c, task)) continue;
        BoxCopy cut = c;
        const int64_t lo = std::max(c.dst_start[0], task.row_begin);
        const int64_t hi = std::min(c.dst_start[0] + c.extent[0], task.row_end);
        cut.src_start[0] += lo - c.dst_start[0];
        cut.dst_start[0] = lo;
        cut.extent[0] = hi - lo;
        const StorageRef& s = m.sources[c.source].storage;
        pieces.emplace(s.file, s.byte_offset, cut.src_start, cut.dst_start, cut.extent);
    }
    return pieces;
}

using Rows = std::vector<std::vector<std::tuple<size_t, int64_t, int64_t>>>;

Rows rows_of(const std::vector<std::vector<WriteTask>>& work) {
    Rows rows(work.size());
    for (size_t r = 0; r < work.size(); ++r)
        for (const WriteTask& t : work[r]) rows[r].emplace_back(t.tensor, t.row_begin, t.row_end);
    return rows;
}

std::vector<std::vector<WriteTask>> work_of(const TensorMapping& m, uint64_t max_shard, int ranks) {
    return plan_rank_work(m.tensors, plan_safetensors_layout(m.tensors, max_shard), ranks);
}

TEST(FsdpShardRouting, EveryRankReceivesWhatItsRowsReadAndComposesTheAllGathersCopies) {
    for (int world : {1, 2, 3, 4}) {
        const auto files = save(world);
        const TensorMapping full = map_fsdp(files);
        const TensorMapping skeleton = map_fsdp({fsdp_skeleton_scan(files[0])});
        for (int ranks : {1, 2, 3, 4}) {
            for (uint64_t max_shard : {uint64_t{100}, uint64_t{1} << 30}) {
                const std::string where = "W=" + std::to_string(world) + " P=" + std::to_string(ranks) +
                                          " max_shard=" + std::to_string(max_shard);
                const auto work = work_of(skeleton, max_shard, ranks);
                ASSERT_EQ(rows_of(work), rows_of(work_of(full, max_shard, ranks))) << where;  // the same plan
                const StorageReaders readers = fsdp_shard_readers(files, files[0], skeleton, work);
                EXPECT_EQ(readers, storage_readers(full, work)) << where;
                for (int r = 0; r < ranks; ++r) {
                    std::vector<std::string> messages = routed_scan_messages(files, readers, ranks);
                    std::vector<std::string> mine{messages[r]};
                    const TensorMapping composed = compose_routed_mapping(skeleton, files[0], received_scans(mine), work[r]);
                    for (const WriteTask& task : work[r])
                        EXPECT_EQ(pieces_of(composed, task), pieces_of(full, task))
                            << where << " rank " << r << " tensor " << task.tensor;
                }
            }
        }
    }
}

TEST(FsdpShardRouting, RowsAShardDoesNotTileAreAnErrorNamingThem) {
    const auto files = save(2);
    const TensorMapping skeleton = map_fsdp({fsdp_skeleton_scan(files[0])});
    const auto work = work_of(skeleton, uint64_t{1} << 30, 1);
    std::vector<ScannedFile> missing{files[0]};  // rank 1's shards never arrived
    const std::string error = testing::error_of([&] { compose_routed_mapping(skeleton, files[0], missing, work[0]); });
    EXPECT_TRUE(testing::contains(error, "b rows [0, 3): the shards cover 2 of 3 elements of [3]")) << error;
}

// The whole routed merge over P ranks as threads: each scans files r, r+P, ...
std::vector<std::optional<RoutedFsdpMerge>> routed_over(int ranks, const std::vector<ScannedFile>& files,
                                                        std::vector<std::string>& why_not) {
    std::vector<std::optional<RoutedFsdpMerge>> results(ranks);
    why_not.assign(ranks, "");
    const SkeletonMapper mapper = [](const ScannedFile& skeleton, const SourceAccount& account) {
        MappedModel model;
        model.mapped.mapping = map_fsdp({skeleton});
        model.mapped.account = account;
        return std::optional<MappedModel>(std::move(model));
    };
    testing::ThreadedRanks threads(ranks);
    threads.run([&](Comm& comm) {
        std::vector<ScannedFile> mine;
        for (size_t i = comm.rank(); i < files.size(); i += comm.size()) mine.push_back(files[i]);
        results[comm.rank()] = route_fsdp_merge(mine, files.size(), mapper, 100, uint64_t{1} << 30, comm, why_not[comm.rank()]);
    });
    return results;
}

TEST(FsdpShardRouting, OverThreadedRanksEachComposesItsOwnRowsOnly) {
    for (int ranks : {1, 2, 3, 4}) {
        const auto files = save(3);
        const TensorMapping full = map_fsdp(files);
        const auto work = work_of(full, 100, ranks);
        std::vector<std::string> why_not;
        const auto results = routed_over(ranks, files, why_not);
        size_t received = 0;
        for (int r = 0; r < ranks; ++r) {
            ASSERT_TRUE(results[r]) << why_not[r];
            const RoutedFsdpMerge& routed = *results[r];
            for (const WriteTask& task : work[r])
                EXPECT_EQ(pieces_of(routed.model.mapped.mapping, task), pieces_of(full, task)) << "rank " << r;
            EXPECT_EQ(routed.received_entries, routed.model.mapped.mapping.sources.size());
            received += routed.received_entries;
            EXPECT_EQ(routed.scans_digest.empty(), r != 0);  // rank 0 keeps the digest
        }
        // 9 entries, 1 of them empty (b over 3 ranks: 1, 1, 1 rows... w 4, 4, 2): each non-empty
        // shard goes to the one or more ranks whose rows it holds.
        EXPECT_GE(received, 9u) << ranks;
        // Every file's empty shards, none here, and every entry written.
        EXPECT_EQ(results[0]->model.mapped.account.written, 9u);
    }
}

TEST(FsdpShardRouting, ASaveWithReplicasTakesTheAllGatherOnEveryRank) {
    auto files = save(2);
    files[1] = save(2)[0];  // two files at shard position 0
    files[1].path = rank_path(2, 1);
    std::vector<std::string> why_not;
    const auto results = routed_over(2, files, why_not);
    for (int r = 0; r < 2; ++r) {
        EXPECT_FALSE(results[r]);
        EXPECT_EQ(why_not[r], "two files hold shard position [0] (replicas)");
    }
}

TEST(FsdpShardRouting, OneRankRoutesToItself) {
    const auto files = save(2);
    SingleRankComm comm;
    std::string why_not;
    const SkeletonMapper mapper = [](const ScannedFile& skeleton, const SourceAccount&) {
        MappedModel model;
        model.mapped.mapping = map_fsdp({skeleton});
        return std::optional<MappedModel>(std::move(model));
    };
    const auto routed = route_fsdp_merge(files, 2, mapper, uint64_t{1} << 30, uint64_t{1} << 30, comm, why_not);
    ASSERT_TRUE(routed) << why_not;
    EXPECT_EQ(routed->received_entries, 6u);
    const TensorMapping full = map_fsdp(files);
    const auto work = work_of(full, uint64_t{1} << 30, 1);
    for (const WriteTask& task : work[0])
        EXPECT_EQ(pieces_of(routed->model.mapped.mapping, task), pieces_of(full, task));
}

TEST(FsdpShardRouting, AShareWhoseMetadataExceedsItsBudgetFailsSayingHowManyRanksWouldFit) {
    const auto files = save(2);
    SingleRankComm comm;
    std::string why_not;
    const SkeletonMapper mapper = [](const ScannedFile& skeleton, const SourceAccount&) {
        MappedModel model;
        model.mapped.mapping = map_fsdp({skeleton});
        return std::optional<MappedModel>(std::move(model));
    };
    // A budget above what every rank holds (the output tensors, ~1 KiB) and below the share.
    const std::string error =
        testing::error_of([&] { route_fsdp_merge(files, 2, mapper, uint64_t{1} << 30, 1500, comm, why_not); });
    EXPECT_TRUE(testing::contains(error, "step 'planning budget' failed: this rank's share of the merge holds 6 "
                                         "scanned entries")) << error;
    EXPECT_TRUE(testing::contains(error, "over its --max-memory budget of 1.5 KiB: about ")) << error;
    const std::string start = "this rank's share of the merge holds 10 scanned entries, ";
    EXPECT_EQ(metadata_over_budget(10, {200, 2800}, 1000, 4),
              start + human_bytes(3000) + " of planning metadata (" + human_bytes(200) +
                  " of it the output tensors every rank holds), over its --max-memory budget of " + human_bytes(1000) +
                  ": about 14 ranks would fit (a share's metadata shrinks with the number of ranks), or raise "
                  "--max-memory");  // 2800 x 4 / (1000 - 200)
    EXPECT_TRUE(testing::contains(metadata_over_budget(10, {1000, 1}, 1000, 4),
                                  ": no number of ranks would fit it; raise --max-memory"));
    EXPECT_EQ(metadata_over_budget(10, {400, 600}, 1000, 4), "");
}

}  // namespace
}  // namespace vmerge
