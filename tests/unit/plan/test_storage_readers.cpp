// storage_readers (plan/storage_readers.h): which ranks' shares read each stored record, on the
// hand-worked example of storage_readers_example.h.
#include <gtest/gtest.h>

#include "plan/storage_readers.h"
#include "plan/storage_readers_example.h"

namespace vmerge {
namespace {

TEST(StorageReaders, EachRecordListsTheRanksWhoseRowsItFeeds) {
    const testing::RoutingExample x = testing::routing_example();
    const StorageReaders expected = {
        {{"f0.pt", 100}, {0, 1}},  // A rows 0-1: rank 0 (row 0) and rank 1 (row 1)
        {{"f1.pt", 100}, {1}},     // A rows 2-3: rank 1
        {{"f0.pt", 200}, {1, 2}},  // B rows 0-1: rank 1 (row 0) and rank 2 (row 1)
        {{"f1.pt", 200}, {2}},     // B rows 2-3: rank 2
        {{"f0.pt", 300}, {2}},     // C
        {{"f1.pt", 300}, {2}},     // C's LoRA factors, read whole by the rank writing C
        {{"f1.pt", 400}, {2}},
    };  // f0.pt's record at 400 feeds no tensor: no entry
    EXPECT_EQ(storage_readers(x.mapping, x.work), expected);
}

TEST(StorageReaders, OneRankReadsEverythingTheMappingCopiesAndARankWithNoWorkNothing) {
    testing::RoutingExample x = testing::routing_example();
    std::vector<std::vector<WriteTask>> one{{{0, 0, 4}, {1, 0, 4}, {2, 0, 2}}, {}};
    const StorageReaders readers = storage_readers(x.mapping, one);
    EXPECT_EQ(readers.size(), 7u);
    for (const auto& [record, ranks] : readers) EXPECT_EQ(ranks, std::vector<int>{0}) << record.first << " " << record.second;
    // Two archives in one file (a .distcp) each have a data/0: told apart by where they are.
    x.mapping.sources[1] = testing::stored("f0.pt", "data/0", 500, {2, 2});
    EXPECT_EQ(storage_readers(x.mapping, x.work).at({"f0.pt", 500}), std::vector<int>{1});
    EXPECT_EQ(storage_readers(x.mapping, x.work).at({"f0.pt", 100}), (std::vector<int>{0, 1}));
    // An empty copy reads nothing.
    x.mapping.tensors[2].copies[0].extent = {0, 2};
    x.mapping.tensors[2].lora_delta.reset();
    EXPECT_FALSE(storage_readers(x.mapping, one).count({"f0.pt", 300}));
}

}  // namespace
}  // namespace vmerge
