// inspect --simulate of the routed FSDP merge (mpi/routed_fsdp_simulation.h) and its two pieces,
// RoutedShareTally and RoutedMessageStore, against the all-gather's mapping: map_fsdp over every
// file, whose storage_readers say which records each rank's rows read. Summing one sender at a
// time must give each rank exactly those records, from exactly those files.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/fsdp/fsdp_backend.h"
#include "formats/fsdp/fsdp_routing.h"
#include "formats/simulated/simulated_checkpoint.h"
#include "fsdp_shard_routing.h"
#include "plan/storage_readers.h"
#include "routed_fsdp_merge.h"
#include "routed_fsdp_simulation.h"
#include "routed_message_store.h"
#include "routed_share_tally.h"
#include "scan_routing.h"

namespace vmerge {
namespace {

constexpr uint64_t kShardSize = uint64_t{1} << 30;  // one output file

// A save of W files with uneven and empty shards: 10 and 7 rows split over up to 4 ranks, a
// 1-d norm of 3 rows (empty shards from W = 4 on).
SimulatedFsdpSave small_save(int world) {
    SimulatedFsdpSave save;
    save.world = world;
    save.tensors = {{"lm_head.weight", {10, 4}},
                    {"model.embed_tokens.weight", {10, 4}},
                    {"model.layers.0.mlp.down_proj.weight", {7, 3}},
                    {"model.norm.weight", {3}}};
    return save;
}

std::vector<ScannedFile> every_file(const SimulatedFsdpSave& save) {
    std::vector<ScannedFile> files;
    for (int r = 0; r < save.world; ++r) files.push_back(simulated_fsdp_rank_file(save, r));
    return files;
}

// What the all-gather's mapping says rank `rank` reads: its records and their files.
struct Share {
    uint64_t entries = 0;
    std::set<std::string> files;
};
std::vector<Share> allgather_shares(const SimulatedFsdpSave& save, int ranks) {
    const TensorMapping mapping = map_fsdp(every_file(save));
    const auto work = routed_rank_work(mapping.tensors, kShardSize, ranks);
    std::vector<Share> shares(static_cast<size_t>(ranks));
    for (const auto& [record, readers] : storage_readers(mapping, work))
        for (const int r : readers) {
            ++shares[r].entries;
            shares[r].files.insert(record.first);
        }
    return shares;
}

SkeletonMapper plain_mapper() {
    return [](const ScannedFile& skeleton, const SourceAccount&) {
        MappedModel model;
        model.mapped.mapping = map_fsdp({skeleton});
        return std::optional<MappedModel>(std::move(model));
    };
}

TEST(RoutedShareTally, OneSenderAtATimeGivesEachRankTheAllGathersRecords) {
    for (int world = 1; world <= 5; ++world)
        for (int ranks = 1; ranks <= 4; ++ranks) {
            SCOPED_TRACE("world " + std::to_string(world) + ", ranks " + std::to_string(ranks));
            const SimulatedFsdpSave save = small_save(world);
            const ScannedFile first = simulated_fsdp_rank_file(save, 0);
            const TensorMapping skeleton = map_fsdp({fsdp_skeleton_scan(first)});
            const auto work = routed_rank_work(skeleton.tensors, kShardSize, ranks);
            RoutedShareTally tally(ranks);
            std::vector<std::vector<std::string>> received(static_cast<size_t>(ranks));
            for (int s = 0; s < ranks; ++s) {
                std::vector<ScannedFile> mine;
                for (int f = s; f < world; f += ranks) mine.push_back(simulated_fsdp_rank_file(save, f));
                const StorageReaders readers = fsdp_shard_readers(mine, first, skeleton, work);
                const std::vector<std::string> messages = routed_scan_messages(mine, readers, ranks);
                tally.add_sender(mine, readers, messages);
                for (int r = 0; r < ranks; ++r) received[r].push_back(messages[r]);
            }
            const std::vector<Share> oracle = allgather_shares(save, ranks);
            for (int r = 0; r < ranks; ++r) {
                EXPECT_EQ(tally.entries()[r], oracle[r].entries) << "rank " << r;
                EXPECT_EQ(tally.files()[r], oracle[r].files.size()) << "rank " << r;
                uint64_t bytes = 0;
                for (const auto& m : received[r]) bytes += m.size();
                EXPECT_EQ(tally.bytes()[r], bytes) << "rank " << r;
                uint64_t decoded = 0;
                for (const ScannedFile& file : received_scans(received[r])) decoded += file.tensors.size();
                EXPECT_EQ(decoded, oracle[r].entries) << "rank " << r;
            }
        }
}

TEST(RoutedShareTally, RankOfMostIsTheLowestOfTheLargest) {
    EXPECT_EQ(rank_of_most({}), 0);
    EXPECT_EQ(rank_of_most({3, 7, 7, 1}), 1);
    EXPECT_EQ(rank_of_most({9}), 0);
}

TEST(RoutedMessageStore, GivesEachReceiverItsMessagesInSenderOrder) {
    RoutedMessageStore store(3);
    store.put(0, "a0");
    store.put(2, "a2");
    store.put(1, "");  // empty: not kept
    store.put(2, "b2-longer");
    store.put(0, "c0");
    EXPECT_EQ(store.received_by(0), (std::vector<std::string>{"a0", "c0"}));
    EXPECT_EQ(store.received_by(1), std::vector<std::string>{});
    EXPECT_EQ(store.received_by(2), (std::vector<std::string>{"a2", "b2-longer"}));
    store.keep_only({2});
    EXPECT_EQ(store.received_by(0), std::vector<std::string>{});
    EXPECT_EQ(store.received_by(2), (std::vector<std::string>{"a2", "b2-longer"}));
}

TEST(RoutedFsdpSimulation, FiguresAreTheAllGathersSharesAndTheModelledRankReceivesMost) {
    for (int world = 1; world <= 5; world += 2)
        for (int ranks = 1; ranks <= 4; ++ranks) {
            SCOPED_TRACE("world " + std::to_string(world) + ", ranks " + std::to_string(ranks));
            const SimulatedFsdpSave save = small_save(world);
            RoutedSimulationInput in;
            in.files = static_cast<size_t>(world);
            in.ranks = ranks;
            in.rank_file = [&](size_t f) { return simulated_fsdp_rank_file(save, static_cast<int>(f)); };
            in.map_skeleton = plain_mapper();
            in.max_shard_size = kShardSize;
            in.budget = uint64_t{1} << 30;
            const RoutedFsdpSimulation sim = simulate_routed_fsdp(in);
            ASSERT_TRUE(sim.why_not.empty()) << sim.why_not;
            ASSERT_TRUE(sim.model);
            EXPECT_EQ(sim.model->mapped.mapping.tensors.size(), save.tensors.size());
            const RoutedPlanningFigures& x = sim.figures;
            EXPECT_EQ(x.shards, static_cast<uint64_t>(world) * save.tensors.size());
            const std::vector<Share> oracle = allgather_shares(save, ranks);
            uint64_t most = 0, all = 0, most_files = 0;
            for (const Share& share : oracle) {
                most = std::max(most, share.entries);
                most_files = std::max<uint64_t>(most_files, share.files.size());
                all += share.entries;
            }
            EXPECT_EQ(x.received_entries_max, most);
            EXPECT_EQ(x.routed_entries, all);
            EXPECT_EQ(x.input_files_max, most_files);
            ASSERT_FALSE(x.modelled.empty());
            const ModelledRoutedRank& m = x.modelled[0];
            EXPECT_EQ(m.received_bytes, x.received_bytes_max);
            EXPECT_EQ(m.received_entries, oracle[m.rank].entries);
            EXPECT_EQ(m.input_files, oracle[m.rank].files.size());
            EXPECT_TRUE(m.over_budget.empty());
            EXPECT_GT(m.metadata_whole_bytes, 0u);
            for (const ModelledRoutedRank& n : x.modelled) EXPECT_LE(n.received_entries, x.received_entries_max);
            if (x.modelled.size() > 1) {
                EXPECT_EQ(x.modelled[1].received_entries, x.received_entries_max);
            }
        }
}

TEST(RoutedFsdpSimulation, ASkeletonThatCannotStandForTheSaveSaysWhy) {
    const SimulatedFsdpSave save = small_save(2);
    RoutedSimulationInput in;
    in.files = 2;
    in.ranks = 2;
    in.max_shard_size = kShardSize;
    in.rank_file = [&](size_t f) { return simulated_fsdp_rank_file(save, static_cast<int>(f)); };
    in.map_skeleton = [](const ScannedFile&, const SourceAccount&) { return std::optional<MappedModel>(); };
    const RoutedFsdpSimulation sim = simulate_routed_fsdp(in);
    EXPECT_FALSE(sim.model);
    EXPECT_NE(sim.why_not.find("names and shapes"), std::string::npos) << sim.why_not;
}

}  // namespace
}  // namespace vmerge
