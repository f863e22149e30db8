#include "mpi_comm.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "core/error.h"
#include "message_rounds.h"

namespace vmerge {
namespace {

void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    throw Error(std::string(what) + " failed: " + std::string(text, length));
}

}  // namespace

MpiComm::MpiComm(MPI_Comm comm, uint64_t max_call_bytes)
    : comm_(comm), max_call_bytes_(std::clamp<uint64_t>(max_call_bytes, 1, INT32_MAX)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    char name[MPI_MAX_PROCESSOR_NAME];
    int length = 0;
    MPI_Get_processor_name(name, &length);
    host_.assign(name, length);
    MPI_Comm node;
    if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &local_size_);
        MPI_Comm_free(&node);
    }
}

std::vector<std::string> MpiComm::allgather(const std::string& mine) {
    if (mine.size() > static_cast<size_t>(INT32_MAX))
        throw Error("allgather: message of " + std::to_string(mine.size()) + " bytes is too large");
    int length = static_cast<int>(mine.size());
    std::vector<int> lengths(size_);
    check(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    std::vector<int> displacements(size_, 0);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
        if (total > INT32_MAX) throw Error("allgather: gathered messages exceed 2 GiB");
        displacements[r] = static_cast<int>(total);
        total += lengths[r];
    }
    if (total > INT32_MAX) throw Error("allgather: gathered messages exceed 2 GiB");
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                         displacements.data(), MPI_CHAR, comm_),
          "MPI_Allgatherv");
    std::vector<std::string> out(size_);
    for (int r = 0; r < size_; ++r) out[r] = all.substr(displacements[r], lengths[r]);
    return out;
}

// Sizes first (one MPI_Alltoall), then the bytes in rounds of MPI_Alltoallv whose counts fit an
// int (message_rounds.h): a message of any size, the rounds agreed from the largest message.
std::vector<std::string> MpiComm::alltoall(std::vector<std::string> outgoing) {
    if (outgoing.size() != static_cast<size_t>(size_))
        throw Error("alltoall: " + std::to_string(outgoing.size()) + " messages for " + std::to_string(size_) + " ranks");
    std::vector<uint64_t> send_sizes(size_), receive_sizes(size_);
    for (int r = 0; r < size_; ++r) send_sizes[r] = outgoing[r].size();
    check(MPI_Alltoall(send_sizes.data(), 1, MPI_UINT64_T, receive_sizes.data(), 1, MPI_UINT64_T, comm_), "MPI_Alltoall");
    uint64_t largest = 0;
    for (int r = 0; r < size_; ++r) largest = std::max({largest, send_sizes[r], receive_sizes[r]});
    check(MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce");
    const MessageRounds rounds = message_rounds(size_, largest, max_call_bytes_);
    std::vector<std::string> incoming(size_);
    for (int r = 0; r < size_; ++r) incoming[r].reserve(receive_sizes[r]);
    std::vector<int> send_counts(size_), send_offsets(size_), receive_counts(size_), receive_offsets(size_);
    std::string send_buffer, receive_buffer;
    for (uint64_t round = 0; round < rounds.rounds; ++round) {
        int send_total = 0, receive_total = 0;
        for (int r = 0; r < size_; ++r) {
            send_counts[r] = static_cast<int>(round_bytes(rounds, send_sizes[r], round));
            send_offsets[r] = send_total;
            send_total += send_counts[r];
            receive_counts[r] = static_cast<int>(round_bytes(rounds, receive_sizes[r], round));
            receive_offsets[r] = receive_total;
            receive_total += receive_counts[r];
        }
        send_buffer.resize(send_total);
        for (int r = 0; r < size_; ++r) {
            if (send_counts[r] > 0)
                outgoing[r].copy(send_buffer.data() + send_offsets[r], send_counts[r], round * rounds.pair_cap);
            // Sent whole: released, so a rank holds each byte twice only for the round it moves in.
            if ((round + 1) * rounds.pair_cap >= send_sizes[r]) std::string().swap(outgoing[r]);
        }
        receive_buffer.resize(receive_total);
        check(MPI_Alltoallv(send_buffer.data(), send_counts.data(), send_offsets.data(), MPI_CHAR, receive_buffer.data(),
                            receive_counts.data(), receive_offsets.data(), MPI_CHAR, comm_),
              "MPI_Alltoallv");
        for (int r = 0; r < size_; ++r) incoming[r].append(receive_buffer, receive_offsets[r], receive_counts[r]);
    }
    return incoming;
}

void MpiComm::broadcast(std::string& text, int root) {
    uint64_t length = text.size();
    check(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast");
    if (length > static_cast<uint64_t>(INT32_MAX))
        throw Error("broadcast: message of " + std::to_string(length) + " bytes is too large");
    text.resize(length);
    check(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, root, comm_), "MPI_Bcast");
}

void MpiComm::abort(int code) { MPI_Abort(comm_, code); }

}  // namespace vmerge
