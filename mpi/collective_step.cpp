#include "collective_step.h"

#include <exception>

#include "exit_code.h"

namespace vmerge {
namespace {

std::string resume_hint(const std::string& staging) {
    return "the unfinished output is kept in " + staging + "; rerun the same command with --resume to continue it";
}

}  // namespace

void collective_step(Comm& comm, const std::string& name, const std::function<void()>& step,
                     const std::string& staging) {
    // A rank's error as gathered: 'E' and its message, or 'S' and the text of a StepError (a
    // step inside this one, already named); "" when the step succeeded.
    std::string error;
    try {
        step();
    } catch (const StepError& e) {
        error = std::string("S") + e.what();
    } catch (const std::exception& e) {
        error = std::string("E") + (*e.what() ? e.what() : "unknown error");
    }
    const auto errors = comm.allgather(error);
    for (int r = 0; r < comm.size(); ++r) {
        if (errors[r].empty()) continue;
        std::string message = errors[r].substr(1);
        if (errors[r][0] == 'E') {
            if (comm.size() > 1) {
                const auto hosts = comm.allgather(comm.host());
                message = "rank " + std::to_string(r) + " (" + hosts[r] + ") failed in step '" + name + "': " + message;
            } else {
                message = "step '" + name + "' failed: " + message;
            }
        }
        if (!staging.empty() && message.find(resume_hint(staging)) == std::string::npos)
            message += "\n" + resume_hint(staging);
        throw StepError(message);
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
