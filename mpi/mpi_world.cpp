#include <mpi.h>

#include <cstdlib>

#include "mpi_comm.h"
#include "process_world.h"
#include "single_rank_comm.h"

namespace vmerge {
namespace {

// Started by a launcher (mpirun, srun)? A plain `vmerge-mpi merge ...` runs as one rank
// without MPI_Init, which would start Open MPI's runtime daemon for nothing (a third of a
// second on a small merge).
bool launched_by_mpi() {
    for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS",
                                 "SLURM_STEP_ID", "HYDRA_CONTROL_FD"})
        if (std::getenv(variable)) return true;
    return std::getenv("VMERGE_FORCE_MPI") != nullptr;
}

}  // namespace

// A program that started MPI itself (a library caller: mpi4py, a trainer) keeps it: its world is
// the run's, and it ends MPI, not this.
ProcessWorld::ProcessWorld(int& argc, char**& argv) {
    int already = 0;
    MPI_Initialized(&already);
    started_mpi_ = !already && launched_by_mpi();
    if (started_mpi_) MPI_Init(&argc, &argv);
    if (already || started_mpi_) comm_ = std::make_unique<MpiComm>(MPI_COMM_WORLD);
    else comm_ = std::make_unique<SingleRankComm>();
}

ProcessWorld::~ProcessWorld() {
    comm_.reset();
    if (started_mpi_) MPI_Finalize();
}

}  // namespace vmerge
