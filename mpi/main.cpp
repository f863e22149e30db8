#include <mpi.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "command_line.h"
#include "debug_knobs.h"
#include "driver.h"
#include "exit_code.h"
#include "mpi_comm.h"
#include "single_rank_comm.h"

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

int main(int argc, char** argv) {
    // A file-size limit (ulimit -f) must surface as a write error naming the file, not kill
    // the rank with SIGXFSZ.
    std::signal(SIGXFSZ, SIG_IGN);
    const bool mpi = launched_by_mpi();
    if (mpi) MPI_Init(&argc, &argv);
    int rank = 0;
    if (mpi) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int code = vmerge::kExitSuccess;
    try {
        auto options = vmerge::parse_command_line(argc, argv, rank == 0);
        if (options) {
            options->debug = vmerge::read_debug_knobs();  // the only read of the debug environment
            std::unique_ptr<vmerge::Comm> comm;
            if (mpi) comm = std::make_unique<vmerge::MpiComm>(MPI_COMM_WORLD);
            else comm = std::make_unique<vmerge::SingleRankComm>();
            code = vmerge::run_command(*options, *comm, std::cout, std::cerr);
        }
    } catch (const vmerge::UsageError& e) {
        if (rank == 0) std::cerr << "vmerge-mpi: usage error: " << e.what() << " (see --help)\n";
        code = vmerge::kExitUsage;
    }
    std::cout.flush();
    if (mpi) MPI_Finalize();
    return code;
}
