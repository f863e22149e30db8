#include "collective_step.h"

#include <exception>

#include "core/error.h"
#include "exit_code.h"

namespace vmerge {
namespace {

std::string resume_hint(const std::string& staging) {
    return "the unfinished output is kept in " + staging + "; rerun the same command with --resume to continue it";
}

}  // namespace

void collective_step(Comm& comm, const std::function<void()>& step, const std::string& staging) {
    std::string error;
    try {
        step();
    } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "unknown error";
    }
    const auto errors = comm.allgather(error);
    for (int r = 0; r < comm.size(); ++r) {
        if (errors[r].empty()) continue;
        std::string message = errors[r];
        if (comm.size() > 1) {
            const auto hosts = comm.allgather(comm.host());
            message = "rank " + std::to_string(r) + " on " + hosts[r] + ": " + message;
        }
        if (!staging.empty())
            message += "\n" + resume_hint(staging);
        throw Error(message);
    }
}

void abort_all_ranks(Comm& comm, std::ostream& err, const std::string& error, const std::string& staging) {
    if (comm.size() == 1) return;
    err << "vmerge-mpi: error: rank " << comm.rank() << " on " << comm.host() << ": " << error << "\n";
    if (!staging.empty()) err << "vmerge-mpi: " << resume_hint(staging) << "\n";
    err.flush();
    comm.abort(kExitFailure);  // mpirun then exits non-zero for the whole job
}

}  // namespace vmerge
