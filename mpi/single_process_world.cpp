#include <cstdlib>
#include <string>

#include "core/error.h"
#include "process_world.h"
#include "single_rank_comm.h"

namespace vmerge {
namespace {

// The process count a launcher announced (Open MPI, MPICH/Hydra and PMI, Slurm's srun); 1 when
// none did.
long launched_processes() {
    for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"})
        if (const char* value = std::getenv(variable)) return std::strtol(value, nullptr, 10);
    return 1;
}

}  // namespace

// Without MPI every process would be rank 0 of 1 and write the whole target: several of them
// launched together must stop before any of them starts.
ProcessWorld::ProcessWorld(int&, char**&) {
    if (const long processes = launched_processes(); processes > 1)
        throw Error("launched as " + std::to_string(processes) +
                    " processes, but this vmerge-mpi was built without MPI (-DVMERGE_MPI=OFF) and runs as one "
                    "process: start it without mpirun/srun, or rebuild with -DVMERGE_MPI=ON");
    comm_ = std::make_unique<SingleRankComm>();
}

ProcessWorld::~ProcessWorld() = default;

}  // namespace vmerge
