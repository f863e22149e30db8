// Routing scanned entries to the ranks that copy them (mpi/scan_routing.h): with the one-rank
// Comm, and with three ranks as threads, each scanning its files (r, r+P, ...) and receiving
// exactly the entries its share reads (storage_readers_example.h works them out by hand).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plan/storage_readers_example.h"
#include "scan_routing.h"
#include "single_rank_comm.h"
#include "threaded_ranks.h"

namespace vmerge {
namespace {

using Received = std::vector<std::pair<std::string, std::string>>;  // (file, key) in arrival order

Received keys_of(const std::vector<ScannedFile>& scans) {
    Received keys;
    for (const auto& file : scans)
        for (const auto& entry : file.tensors) keys.emplace_back(file.path, entry.key);
    return keys;
}

TEST(ScanRouting, OneRankReceivesEveryEntryItCopiesAndNothingElse) {
    const testing::RoutingExample x = testing::routing_example();
    SingleRankComm comm;
    const std::vector<std::vector<WriteTask>> one{{{0, 0, 4}, {1, 0, 4}, {2, 0, 2}}};
    const std::vector<ScannedFile> received = route_scans(comm, x.scans, storage_readers(x.mapping, one));
    EXPECT_EQ(keys_of(received), (Received{{"f0.pt", "a"}, {"f0.pt", "b"}, {"f0.pt", "c"}, {"f1.pt", "a"},
                                           {"f1.pt", "b"}, {"f1.pt", "c.lora_A"}, {"f1.pt", "c.lora_B"}}));
    // The entries arrive as scanned (their storage, shapes), without the file's non-tensor keys.
    ASSERT_EQ(received.size(), 2u);
    EXPECT_EQ(received[0].tensors[2].tensor.storage.key, "data/2");
    EXPECT_EQ(received[0].tensors[2].tensor.shape, (Shape{2, 2}));
    EXPECT_TRUE(received[0].skipped.empty());
}

TEST(ScanRouting, EachOfThreeRanksReceivesOnlyTheEntriesItsShareReads) {
    const testing::RoutingExample x = testing::routing_example();
    const std::vector<Received> expected = {
        {{"f0.pt", "a"}},
        {{"f0.pt", "a"}, {"f0.pt", "b"}, {"f1.pt", "a"}},                                   // from rank 0, then rank 1
        {{"f0.pt", "b"}, {"f0.pt", "c"}, {"f1.pt", "b"}, {"f1.pt", "c.lora_A"}, {"f1.pt", "c.lora_B"}},
    };
    std::vector<Received> received(3);
    testing::ThreadedRanks ranks(3);
    ranks.run([&](Comm& comm) {
        std::vector<ScannedFile> mine;  // files r, r+P, ...: rank 2 scanned none
        for (size_t i = comm.rank(); i < x.scans.size(); i += comm.size()) mine.push_back(x.scans[i]);
        const StorageReaders readers = storage_readers(x.mapping, x.work);  // every rank plans the same
        received[comm.rank()] = keys_of(route_scans(comm, mine, readers));
    });
    EXPECT_EQ(received, expected);
}

TEST(ScanRouting, AMessageHoldsOnlyTheFilesWithEntriesForItsRank) {
    const testing::RoutingExample x = testing::routing_example();
    std::vector<std::string> messages = routed_scan_messages({x.scans[1]}, storage_readers(x.mapping, x.work), 3);
    EXPECT_TRUE(messages[0].empty());  // rank 0 reads nothing of f1.pt: no message at all
    std::vector<std::string> to_rank_1{messages[1]};
    EXPECT_EQ(keys_of(received_scans(to_rank_1)), (Received{{"f1.pt", "a"}}));
    EXPECT_TRUE(to_rank_1[0].empty());  // released once decoded
}

}  // namespace
}  // namespace vmerge
