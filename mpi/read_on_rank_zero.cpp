#include "read_on_rank_zero.h"

#include "collective_step.h"

namespace vmerge {

std::string read_on_rank_zero(Comm& comm, const std::string& name, const std::function<std::string()>& read) {
    std::string text;
    collective_step(comm, name, [&] {
        if (comm.rank() == 0) text = read();
    });
    comm.broadcast(text, 0);
    return text;
}

}  // namespace vmerge
