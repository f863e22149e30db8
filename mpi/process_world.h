#pragma once
#include <memory>

#include "comm.h"

namespace vmerge {

// The processes one run of the command is made of. The MPI build (mpi_world.cpp) joins MPI's
// world when a launcher (mpirun, srun) started it and runs as one rank otherwise; the build
// without MPI (single_process_world.cpp) is always one rank, and refuses a launch of several
// processes (each would write the whole target over the others).
class ProcessWorld {
public:
    // May start MPI (MPI_Init); Error when this build cannot be the processes it was launched as.
    ProcessWorld(int& argc, char**& argv);
    ~ProcessWorld();  // ends MPI when it started it
    ProcessWorld(const ProcessWorld&) = delete;
    ProcessWorld& operator=(const ProcessWorld&) = delete;

    Comm& comm() { return *comm_; }

private:
    std::unique_ptr<Comm> comm_;
    [[maybe_unused]] bool started_mpi_ = false;  // the build without MPI never starts it
};

}  // namespace vmerge
