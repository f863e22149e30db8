#include "mpi_comm.h"

#include <cstdint>
#include <numeric>

#include "core/error.h"

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

MpiComm::MpiComm(MPI_Comm comm) : comm_(comm) {
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
