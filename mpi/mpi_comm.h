#pragma once
#include <mpi.h>

#include "comm.h"

namespace vmerge {

class MpiComm : public Comm {
public:
    explicit MpiComm(MPI_Comm comm);
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string host() const override { return host_; }
    int local_size() const override { return local_size_; }
    std::vector<std::string> allgather(const std::string& mine) override;
    void broadcast(std::string& text, int root) override;
    void abort(int code) override;
    const void* parallel_context() const override { return &comm_; }

private:
    MPI_Comm comm_;
    int rank_ = 0;
    int size_ = 1;
    int local_size_ = 1;
    std::string host_;
};

}  // namespace vmerge
