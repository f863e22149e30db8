#pragma once
#include <functional>
#include <ostream>
#include <string>

#include "comm.h"

namespace vmerge {

// Runs `step` on every rank; afterwards all ranks know whether all succeeded. On any
// failure every rank throws the same Error, naming the first failing rank and its host.
void collective_step(Comm& comm, const std::function<void()>& step, const std::string& staging = "");

// For a rank that failed where the others may be blocked (mid-copy, inside a collective
// write): prints its error (and, with `staging`, how to resume) and stops every rank at once.
// With one rank it returns, and the caller rethrows as usual.
void abort_all_ranks(Comm& comm, std::ostream& err, const std::string& error, const std::string& staging = "");

}  // namespace vmerge
