#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <vector>

#include "output/hdf5/mpi_c.h"

namespace vmerge {

// Moves every rank's chunk parcels to rank 0, the one process that holds a compressed archive
// open (docs/hdf5.md, "Writing in parallel"). Ranks send as soon as a parcel is full, with at
// most two in flight, so they compress on while rank 0 writes, and end with an empty message;
// rank 0 takes in what has arrived between its own pieces, and the rest at the end.
// Point-to-point on the job's communicator, called only from the thread that initialised MPI.
class ParcelExchange {
public:
    ParcelExchange(MPI_Comm comm, int rank, int ranks);
    ~ParcelExchange();
    ParcelExchange(const ParcelExchange&) = delete;
    ParcelExchange& operator=(const ParcelExchange&) = delete;

    // Ranks other than 0: sends `parcel`, keeping it until MPI is done with it; returns an empty
    // buffer (an earlier parcel's, its capacity kept) to fill next. Throws Error.
    std::vector<unsigned char> send(std::vector<unsigned char>&& parcel);
    // Ranks other than 0: sends the end message and waits until rank 0 has received everything.
    void finish_sends();

    using Handle = std::function<void(const std::vector<unsigned char>& parcel)>;
    // Rank 0: receives every parcel that has arrived (`wait`: until every rank's end message),
    // in arrival order, calling `handle` on each. Throws Error.
    void receive(bool wait, const Handle& handle);

private:
    void receive_one(const MPI_Status& probed, const Handle& handle);

    MPI_Comm comm_;
    int rank_;
    int sending_ = 0;  // rank 0: ranks whose end message is still to come
    std::array<std::vector<unsigned char>, 2> in_flight_;
    std::array<MPI_Request, 2> requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    size_t next_ = 0;
    std::vector<unsigned char> received_;
};

}  // namespace vmerge
