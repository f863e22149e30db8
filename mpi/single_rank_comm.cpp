#include "single_rank_comm.h"

#include <unistd.h>

namespace vmerge {

std::string SingleRankComm::host() const {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
}

}  // namespace vmerge
