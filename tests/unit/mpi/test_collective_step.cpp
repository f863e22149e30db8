// collective_step (mpi/collective_step.h): a failure in a step becomes the same StepError on
// every rank, naming the step (and, with several ranks, the failing rank and its host) before the
// original message, which stays whole.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "collective_step.h"
#include "core/error.h"
#include "single_rank_comm.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::error_of;

TEST(CollectiveStep, ASucceedingStepRunsOnceAndThrowsNothing) {
    SingleRankComm comm;
    int runs = 0;
    EXPECT_NO_THROW(collective_step(comm, "scan", [&] { ++runs; }));
    EXPECT_EQ(runs, 1);
}

TEST(CollectiveStep, TheErrorNamesTheStepBeforeTheMessage) {
    SingleRankComm comm;
    const auto fail = [] { throw Error("/ckpt/model_world_size_2_rank_1.pt: truncated ZIP"); };
    EXPECT_EQ(error_of([&] { collective_step(comm, "scan", fail); }),
              "step 'scan' failed: /ckpt/model_world_size_2_rank_1.pt: truncated ZIP");
    EXPECT_THROW(collective_step(comm, "scan", fail), StepError);
    // Any std::exception is reported, and an empty message still says something.
    EXPECT_EQ(error_of([&] { collective_step(comm, "map", [] { throw std::runtime_error("bad"); }); }),
              "step 'map' failed: bad");
    EXPECT_EQ(error_of([&] { collective_step(comm, "map", [] { throw std::runtime_error(""); }); }),
              "step 'map' failed: unknown error");
}

TEST(CollectiveStep, AStagingFolderAddsTheResumeHint) {
    SingleRankComm comm;
    const std::string message =
        error_of([&] { collective_step(comm, "copy", [] { throw Error("disk full"); }, "/out/.t.vmerge-staging"); });
    EXPECT_EQ(message, "step 'copy' failed: disk full\nthe unfinished output is kept in /out/.t.vmerge-staging; rerun "
                       "the same command with --resume to continue it");
}

TEST(CollectiveStep, AStepInsideAStepKeepsTheInnerName) {
    SingleRankComm comm;
    const auto outer = [&] { collective_step(comm, "read config.json", [] { throw Error("no config.json"); }); };
    EXPECT_EQ(error_of([&] { collective_step(comm, "map", outer, "/s"); }),
              "step 'read config.json' failed: no config.json\nthe unfinished output is kept in /s; rerun the same "
              "command with --resume to continue it");
}

// Rank 1 of two as it sees the step: rank 0 succeeded (its part of each gather is scripted),
// rank 1 failed.
class SecondOfTwoRanks : public Comm {
public:
    int rank() const override { return 1; }
    int size() const override { return 2; }
    std::string host() const override { return "node1"; }
    int local_size() const override { return 1; }
    std::vector<std::string> allgather(const std::string& mine) override {
        const std::string rank0 = gathers_++ == 0 ? "" : "node0";  // the step's outcome, then the hosts
        return {rank0, mine};
    }
    std::vector<std::string> alltoall(std::vector<std::string> outgoing) override { return outgoing; }
    void broadcast(std::string&, int) override {}
    void abort(int) override {}

private:
    int gathers_ = 0;
};

TEST(CollectiveStep, WithSeveralRanksTheFailingRankAndHostComeFirst) {
    SecondOfTwoRanks comm;
    EXPECT_EQ(error_of([&] { collective_step(comm, "tied-head check", [] { throw Error("lm_head.weight differs"); }); }),
              "rank 1 (node1) failed in step 'tied-head check': lm_head.weight differs");
}

}  // namespace
}  // namespace vmerge
