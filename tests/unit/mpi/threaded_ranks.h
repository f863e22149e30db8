#pragma once
// P ranks as P threads of one process, exchanging through shared memory: a Comm for tests of
// collective code (the scan routing, Comm::alltoall's contract) at P > 1 without MPI.
#include <barrier>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm.h"

namespace vmerge::testing {

class ThreadedRanks {
public:
    explicit ThreadedRanks(int ranks)
        : ranks_(ranks), barrier_(ranks), mail_(ranks, std::vector<std::string>(ranks)) {}

    // Runs `body` as every rank, each on its own thread, and rethrows the first failure. A body
    // that throws before a collective the others enter would leave them waiting: bodies under test
    // fail only by EXPECT_*.
    void run(const std::function<void(Comm&)>& body) {
        std::vector<std::thread> threads;
        std::exception_ptr failure;
        std::mutex failure_lock;
        for (int r = 0; r < ranks_; ++r)
            threads.emplace_back([&, r] {
                RankComm comm(*this, r);
                try {
                    body(comm);
                } catch (...) {
                    const std::lock_guard lock(failure_lock);
                    if (!failure) failure = std::current_exception();
                }
            });
        for (auto& t : threads) t.join();
        if (failure) std::rethrow_exception(failure);
    }

private:
    class RankComm : public Comm {
    public:
        RankComm(ThreadedRanks& all, int rank) : all_(all), rank_(rank) {}
        int rank() const override { return rank_; }
        int size() const override { return all_.ranks_; }
        std::string host() const override { return "thread-node"; }
        int local_size() const override { return all_.ranks_; }
        std::vector<std::string> alltoall(std::vector<std::string> outgoing) override {
            if (outgoing.size() != static_cast<size_t>(size())) throw std::invalid_argument("alltoall: wrong count");
            for (int d = 0; d < size(); ++d) all_.mail_[rank_][d] = std::move(outgoing[d]);
            all_.barrier_.arrive_and_wait();
            std::vector<std::string> incoming(size());
            for (int s = 0; s < size(); ++s) incoming[s] = std::move(all_.mail_[s][rank_]);
            all_.barrier_.arrive_and_wait();
            return incoming;
        }
        std::vector<std::string> allgather(const std::string& mine) override {
            all_.mail_[rank_][0] = mine;
            all_.barrier_.arrive_and_wait();
            std::vector<std::string> all(size());
            for (int s = 0; s < size(); ++s) all[s] = all_.mail_[s][0];
            all_.barrier_.arrive_and_wait();
            return all;
        }
        void broadcast(std::string& text, int root) override {
            if (rank_ == root) all_.mail_[root][0] = text;
            all_.barrier_.arrive_and_wait();
            if (rank_ != root) text = all_.mail_[root][0];
            all_.barrier_.arrive_and_wait();
        }
        void abort(int) override {}

    private:
        ThreadedRanks& all_;
        int rank_;
    };

    int ranks_;
    std::barrier<> barrier_;
    std::vector<std::vector<std::string>> mail_;  // [sender][receiver]
};

}  // namespace vmerge::testing
