#include "output/hdf5/parcel_exchange.h"

#include <chrono>
#include <climits>
#include <string>
#include <thread>

#include "core/error.h"

namespace vmerge {
namespace {

constexpr int kParcelTag = 18015;  // distinct from any other point-to-point message of the merge

void check_mpi(int rc, const std::string& what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    throw Error("HDF5 archive: " + what + ": " + std::string(text, static_cast<size_t>(length)));
}

// Waiting here polls and sleeps instead of blocking in MPI: Open MPI's blocking calls spin a
// core, which on a node with fewer cores than threads is taken from the ranks still compressing
// (measured: 2 ranks on 2 cores spent twice one rank's CPU time). A parcel takes milliseconds to
// make, so 200 us of added latency is nothing.
void pause_briefly() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }

void wait_politely(MPI_Request* requests, int count, const std::string& what) {
    for (;;) {
        int done = 0;
        check_mpi(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), what);
        if (done) return;
        pause_briefly();
    }
}

}  // namespace

ParcelExchange::ParcelExchange(MPI_Comm comm, int rank, int ranks)
    : comm_(comm), rank_(rank), sending_(rank == 0 ? ranks - 1 : 0) {}

ParcelExchange::~ParcelExchange() {
    // Only after a failure are sends still pending; the job is being aborted then (the archive is
    // written collectively), so they are let go rather than waited for.
    for (MPI_Request& request : requests_)
        if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
}

std::vector<unsigned char> ParcelExchange::send(std::vector<unsigned char>&& parcel) {
    if (parcel.size() > static_cast<size_t>(INT_MAX))
        throw Error("HDF5 archive: a piece of " + std::to_string(parcel.size()) +
                    " compressed bytes is more than one MPI message holds (2 GiB): lower --max-memory or "
                    "--hdf5_chunk_size");
    MPI_Request& slot = requests_[next_];
    wait_politely(&slot, 1, "sending compressed chunks to rank 0");
    std::vector<unsigned char> free_buffer = std::move(in_flight_[next_]);
    free_buffer.clear();
    in_flight_[next_] = std::move(parcel);
    check_mpi(MPI_Isend(in_flight_[next_].data(), static_cast<int>(in_flight_[next_].size()), MPI_BYTE, 0, kParcelTag,
                        comm_, &slot),
              "sending compressed chunks to rank 0");
    next_ = 1 - next_;
    return free_buffer;
}

void ParcelExchange::finish_sends() {
    send({});  // the end: parcels are never empty
    wait_politely(requests_.data(), static_cast<int>(requests_.size()), "sending compressed chunks to rank 0");
    for (auto& buffer : in_flight_) std::vector<unsigned char>().swap(buffer);
}

void ParcelExchange::receive_one(const MPI_Status& probed, const Handle& handle) {
    int count = 0;
    check_mpi(MPI_Get_count(&probed, MPI_BYTE, &count), "receiving compressed chunks");
    received_.resize(static_cast<size_t>(count));
    check_mpi(MPI_Recv(received_.data(), count, MPI_BYTE, probed.MPI_SOURCE, kParcelTag, comm_,
                       MPI_STATUS_IGNORE),
              "receiving compressed chunks from rank " + std::to_string(probed.MPI_SOURCE));
    if (count == 0) --sending_;
    else handle(received_);
}

void ParcelExchange::receive(bool wait, const Handle& handle) {
    while (sending_ > 0) {
        MPI_Status status;
        int arrived = 0;
        check_mpi(MPI_Iprobe(MPI_ANY_SOURCE, kParcelTag, comm_, &arrived, &status), "receiving compressed chunks");
        if (arrived) {
            receive_one(status, handle);
            continue;
        }
        if (!wait) return;
        pause_briefly();
    }
    if (wait) std::vector<unsigned char>().swap(received_);
}

}  // namespace vmerge
