#pragma once
#include <mpi.h>

#include <cstdint>

#include "comm.h"

namespace vmerge {

class MpiComm : public Comm {
public:
    // max_call_bytes: the most one rank sends or receives in one MPI call of alltoall (MPI's
    // counts are `int`); tests lower it to exercise the rounds.
    explicit MpiComm(MPI_Comm comm, uint64_t max_call_bytes = INT32_MAX);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string host() const override { return host_; }
    int local_size() const override { return local_size_; }
    std::vector<std::string> allgather(const std::string& mine) override;
    std::vector<std::string> alltoall(std::vector<std::string> outgoing) override;
    void broadcast(std::string& text, int root) override;
    void abort(int code) override;
    const void* parallel_context() const override { return &comm_; }

private:
    MPI_Comm comm_;
    uint64_t max_call_bytes_;
    int rank_ = 0;
    int size_ = 1;
    int local_size_ = 1;
    std::string host_;
};

}  // namespace vmerge
