#pragma once
#include <string>
#include <vector>

namespace vmerge {

// The few collectives the driver needs. The MPI implementation lives in mpi_comm.cpp; the
// one-rank implementation lets the whole driver run (and be tested) without MPI.
class Comm {
public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string host() const = 0;
    // Ranks on this node (they share its memory).
    virtual int local_size() const = 0;
    // Every rank contributes one string and receives all of them, in rank order.
    virtual std::vector<std::string> allgather(const std::string& mine) = 0;
    // Every rank sends `outgoing[d]` to rank d (one message to each rank, itself included, any
    // of them empty; outgoing.size() must be size()) and receives what each rank sent it, in
    // rank order. Routing scanned pieces to the ranks that copy them (docs/scaling.md).
    virtual std::vector<std::string> alltoall(std::vector<std::string> outgoing) = 0;
    // Every rank receives `root`'s `text` (a small file rank `root` read for all of them).
    virtual void broadcast(std::string& text, int root) = 0;
    // Stops every rank now (a rank that failed mid-copy must not leave the others writing
    // for hours before the next collective). The one-rank Comm returns and lets the error
    // propagate normally.
    virtual void abort(int code) = 0;
    // The communicator itself, opaque, for the output formats that write collectively
    // (OutputOptions::parallel: a `const MPI_Comm*`); null for the one-rank Comm (no MPI).
    virtual const void* parallel_context() const { return nullptr; }
};

}  // namespace vmerge
