#pragma once
#include <iosfwd>

#include "command_line.h"
#include "comm.h"

namespace vmerge {

// Runs one command over `comm`: discover, scan (spread over ranks, all-gathered), map,
// plan, execute, commit. Every rank returns the same exit code; only rank 0 prints.
int run_command(const Options& options, Comm& comm, std::ostream& out, std::ostream& err);

}  // namespace vmerge
