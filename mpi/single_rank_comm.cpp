#include "single_rank_comm.h"

#include <unistd.h>

#include "core/error.h"

namespace vmerge {

std::string SingleRankComm::host() const {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
}

// One rank: its one message is to itself.
std::vector<std::string> SingleRankComm::alltoall(std::vector<std::string> outgoing) {
    if (outgoing.size() != 1)
        throw Error("alltoall: " + std::to_string(outgoing.size()) + " messages for 1 rank");
    return outgoing;
}

// One rank: it is the root, and `text` already holds what it read.
void SingleRankComm::broadcast(std::string&, int) {}

}  // namespace vmerge
