#pragma once
#include <functional>
#include <ostream>
#include <string>

#include "comm.h"
#include "core/error.h"

namespace vmerge {

// The Error collective_step throws: the same on every rank, the step already named in it.
class StepError : public Error {
public:
    using Error::Error;
};

// Runs `step` on every rank; afterwards all ranks know whether all succeeded. On any failure
// every rank throws the same StepError, naming the step (`name`, a few words: "scan", "map")
// and, with several ranks, the first failing rank and its host, before that rank's message:
// "rank 1 (node17) failed in step 'scan': MESSAGE"; with one rank "step 'scan' failed: MESSAGE".
// A StepError from a step run inside `step` keeps its text. `staging`: a resume hint follows.
void collective_step(Comm& comm, const std::string& name, const std::function<void()>& step,
                     const std::string& staging = "");

// For a rank that failed where the others may be blocked (mid-copy, inside a collective
// write): prints its error (and, with `staging`, how to resume) and stops every rank at once.
// With one rank it returns, and the caller rethrows as usual.
void abort_all_ranks(Comm& comm, std::ostream& err, const std::string& error, const std::string& staging = "");

}  // namespace vmerge
