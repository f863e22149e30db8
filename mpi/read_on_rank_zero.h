#pragma once
#include <functional>
#include <string>

#include "comm.h"

namespace vmerge {

// Rank 0 runs `read` (config.json, LoRA metadata: small files every rank needs) and every rank
// receives what it returned, so a shared file system serves one open instead of one per rank.
// A failure on rank 0 fails every rank with rank 0's message (collective_step, the step `name`),
// the message each rank gave when all of them read the file.
std::string read_on_rank_zero(Comm& comm, const std::string& name, const std::function<std::string()>& read);

}  // namespace vmerge
