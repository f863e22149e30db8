// The vmerge-mpi command as a call of the public interface (include/vmerge/vmerge.hpp): the
// process's world, the command line, the driver; mpi/main.cpp is only this.
#include <csignal>
#include <iostream>
#include <optional>

#include "vmerge/vmerge.hpp"

#include "command_line.h"
#include "core/error.h"
#include "debug_knobs.h"
#include "driver.h"
#include "exit_code.h"
#include "process_world.h"

namespace vmerge::api {

int command_line_main(int argc, char** argv) {
    // A file-size limit (ulimit -f) must surface as a write error naming the file, not kill
    // the rank with SIGXFSZ.
    std::signal(SIGXFSZ, SIG_IGN);
    std::optional<vmerge::ProcessWorld> world;
    try {
        world.emplace(argc, argv);
    } catch (const vmerge::Error& e) {
        std::cerr << "vmerge-mpi: error: " << e.what() << "\n";
        return vmerge::kExitFailure;
    }
    const int rank = world->comm().rank();
    int code = vmerge::kExitSuccess;
    try {
        auto options = vmerge::parse_command_line(argc, argv, rank == 0);
        if (options) {
            options->debug = vmerge::read_debug_knobs();  // the only read of the debug environment
            code = vmerge::run_command(*options, world->comm(), std::cout, std::cerr);
        }
    } catch (const vmerge::UsageError& e) {
        if (rank == 0) std::cerr << "vmerge-mpi: usage error: " << e.what() << " (see --help)\n";
        code = vmerge::kExitUsage;
    }
    std::cout.flush();
    return code;
}

}  // namespace vmerge::api
