#include <mpi.h>

#include <csignal>
#include <iostream>

#include "command_line.h"
#include "driver.h"
#include "mpi_comm.h"

int main(int argc, char** argv) {
    // A file-size limit (ulimit -f) must surface as a write error naming the file, not kill
    // the rank with SIGXFSZ.
    std::signal(SIGXFSZ, SIG_IGN);
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int code = 0;
    try {
        auto options = vmerge::parse_command_line(argc, argv, rank == 0);
        if (options) {
            vmerge::MpiComm comm(MPI_COMM_WORLD);
            code = vmerge::run_command(*options, comm, std::cout, std::cerr);
        }
    } catch (const vmerge::UsageError& e) {
        if (rank == 0) std::cerr << "vmerge-mpi: " << e.what() << " (see --help)\n";
        code = 2;
    }
    std::cout.flush();
    MPI_Finalize();
    return code;
}
