#pragma once
#include <functional>
#include <string>

#include "comm.h"

namespace vmerge {

// Runs `step` on every rank; afterwards all ranks know whether all succeeded. On any
// failure every rank throws the same Error, naming the first failing rank and its host.
void collective_step(Comm& comm, const std::function<void()>& step, const std::string& staging = "");

}  // namespace vmerge
