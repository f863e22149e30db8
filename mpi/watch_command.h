#pragma once
#include <functional>
#include <ostream>

#include "command_line.h"
#include "comm.h"

namespace vmerge {

// One merge with the given options (the driver's merge command), for each step watch finds.
using StepMerge = std::function<void(const Options& step)>;

// `vmerge-mpi watch`: merges every complete checkpoint under --root not yet merged into
// --target_root/<step>/, oldest first, resuming an interrupted one; then waits --every seconds
// and looks again (--once: one pass). Rank 0 holds the watcher's lock and scans; every rank
// takes part in each merge. Returns 1 when a step failed (the others are still merged).
int run_watch(const Options& o, Comm& comm, std::ostream& out, std::ostream& err, const StepMerge& merge);

}  // namespace vmerge
