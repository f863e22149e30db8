// Comm::alltoall: the one-rank Comm, P ranks as threads (threaded_ranks.h), and the rounds the
// MPI Comm splits a large exchange into (message_rounds.h). The MPI Comm itself runs under mpirun
// in tests/mpi_checks/alltoall_check.cpp (ctest mpi_alltoall_np*).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "message_rounds.h"
#include "single_rank_comm.h"
#include "test_support.h"
#include "threaded_ranks.h"

namespace vmerge {
namespace {

using testing::error_of;

// The message rank `from` sends rank `to` in these tests: sizes 0..22, some empty, contents
// naming both ends so a misrouted byte shows.
std::string message(int from, int to) {
    const size_t length = static_cast<size_t>(from * 7 + to * 13) % 23;
    std::string text;
    for (size_t i = 0; i < length; ++i) text.push_back(static_cast<char>('a' + (from * 5 + to * 3 + i) % 26));
    return text;
}

TEST(AllToAll, OneRankReceivesItsOwnMessage) {
    SingleRankComm comm;
    EXPECT_EQ(comm.alltoall({"to myself"}), std::vector<std::string>{"to myself"});
    EXPECT_EQ(comm.alltoall({""}), std::vector<std::string>{""});
    EXPECT_EQ(error_of([&] { comm.alltoall({"a", "b"}); }), "alltoall: 2 messages for 1 rank");
}

TEST(AllToAll, EveryRankReceivesWhatEachRankSentItInRankOrder) {
    for (int ranks = 1; ranks <= 5; ++ranks) {
        testing::ThreadedRanks threads(ranks);
        threads.run([&](Comm& comm) {
            std::vector<std::string> outgoing;
            for (int to = 0; to < comm.size(); ++to) outgoing.push_back(message(comm.rank(), to));
            const std::vector<std::string> incoming = comm.alltoall(outgoing);
            ASSERT_EQ(incoming.size(), static_cast<size_t>(ranks));
            for (int from = 0; from < ranks; ++from)
                EXPECT_EQ(incoming[from], message(from, comm.rank())) << from << " -> " << comm.rank() << " of " << ranks;
        });
    }
}

TEST(MessageRounds, EachPairGetsAShareOfTheCallAndTheLargestMessageSetsTheRounds) {
    MessageRounds rounds = message_rounds(4, 1000, 400);
    EXPECT_EQ(rounds.pair_cap, 100u);
    EXPECT_EQ(rounds.rounds, 10u);
    EXPECT_EQ(message_rounds(4, 1001, 400).rounds, 11u);
    EXPECT_EQ(message_rounds(4, 0, 400).rounds, 0u);  // nothing to send: no call at all
    // More ranks than bytes per call: still one byte per pair and round, never a stalled round.
    rounds = message_rounds(8, 3, 5);
    EXPECT_EQ(rounds.pair_cap, 1u);
    EXPECT_EQ(rounds.rounds, 3u);
    // MPI's int counts: 4096 ranks, 3 GB between two of them.
    rounds = message_rounds(4096, 3'000'000'000ull, INT32_MAX);
    EXPECT_EQ(rounds.pair_cap, static_cast<uint64_t>(INT32_MAX) / 4096);
    EXPECT_LE(rounds.pair_cap * 4096, static_cast<uint64_t>(INT32_MAX));
    EXPECT_EQ(rounds.rounds, (3'000'000'000ull + rounds.pair_cap - 1) / rounds.pair_cap);
    EXPECT_EQ(error_of([] { message_rounds(0, 1, 1); }), "alltoall: 0 ranks");
}

TEST(MessageRounds, TheRoundsMoveEveryMessageWholeAndNoCallExceedsItsLimit) {
    const int ranks = 3;
    const uint64_t max_call = 10;
    const std::vector<uint64_t> sizes{0, 1, 3, 4, 9, 23};
    const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
    const MessageRounds rounds = message_rounds(ranks, largest, max_call);
    for (const uint64_t size : sizes) {
        uint64_t moved = 0;
        for (uint64_t round = 0; round < rounds.rounds; ++round) {
            const uint64_t bytes = round_bytes(rounds, size, round);
            EXPECT_LE(bytes * ranks, max_call);
            moved += bytes;
        }
        EXPECT_EQ(moved, size);
        EXPECT_EQ(round_bytes(rounds, size, rounds.rounds), 0u);
    }
}

}  // namespace
}  // namespace vmerge
