#include "collective_step.h"

#include <exception>

#include "vmerge/error.h"

namespace vmerge {

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
            message += "\nthe unfinished output is kept in " + staging + "; rerun the same command with --resume to continue it";
        throw Error(message);
    }
}

}  // namespace vmerge
