// MpiComm::alltoall under mpirun: every rank sends every rank (itself included) a message of its
// own size and contents, and checks what it receives, first in one call per exchange, then with
// the per-call limit lowered so that the exchange is split into many rounds (message_rounds.h),
// then with one message far larger than the others. Exit 0 on every rank when all arrived intact.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpi_comm.h"

namespace {

// What rank `from` sends rank `to`: `length` bytes that name both ends and the position.
std::string message(int from, int to, size_t length) {
    std::string text(length, '\0');
    for (size_t i = 0; i < length; ++i) text[i] = static_cast<char>((from * 131 + to * 31 + i * 7) % 251);
    return text;
}

size_t ordinary_length(int from, int to) { return static_cast<size_t>(from * 7 + to * 13) % 23; }

// One exchange over `comm`; returns the number of messages that arrived wrong.
int exchange(vmerge::MpiComm& comm, const char* name, size_t (*length)(int, int)) {
    std::vector<std::string> outgoing;
    for (int to = 0; to < comm.size(); ++to) outgoing.push_back(message(comm.rank(), to, length(comm.rank(), to)));
    const std::vector<std::string> incoming = comm.alltoall(std::move(outgoing));
    int wrong = 0;
    for (int from = 0; from < comm.size(); ++from) {
        if (incoming[from] == message(from, comm.rank(), length(from, comm.rank()))) continue;
        std::fprintf(stderr, "%s: rank %d got %zu bytes from rank %d, expected %zu\n", name, comm.rank(),
                     incoming[from].size(), from, length(from, comm.rank()));
        ++wrong;
    }
    return wrong;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int wrong = 0;
    {
        vmerge::MpiComm whole(MPI_COMM_WORLD);
        vmerge::MpiComm small_calls(MPI_COMM_WORLD, 8);  // 8 / P bytes per pair and round: many rounds
        vmerge::MpiComm medium_calls(MPI_COMM_WORLD, 256);  // 256 / P: tens of rounds for the large one
        wrong += exchange(whole, "one call", ordinary_length);
        wrong += exchange(small_calls, "rounds", ordinary_length);
        wrong += exchange(whole, "all empty", [](int, int) -> size_t { return 0; });
        // Rank 0 sends every other rank a large message, the others send small ones or none: the
        // ranks with nothing left to send keep taking part in every round.
        const auto large = [](int from, int to) -> size_t {
            if (from == 0) return to == 0 ? 0 : 5000 + static_cast<size_t>(to);
            return ordinary_length(from, to) % 3;
        };
        wrong += exchange(medium_calls, "one large", large);
        int total = 0;
        MPI_Allreduce(&wrong, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (whole.rank() == 0) std::printf("alltoall over %d ranks: %d messages wrong\n", whole.size(), total);
        wrong = total;
    }
    MPI_Finalize();
    return wrong == 0 ? 0 : 1;
}
