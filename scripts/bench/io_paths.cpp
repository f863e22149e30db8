// Writes the same bytes the way vmerge does (each rank a contiguous, equal share of one file,
// in blocks) through three paths: POSIX pwrite (vmerge's writer), MPI-IO independent
// MPI_File_write_at, and MPI-IO collective MPI_File_write_at_all. Prints seconds and GB/s per
// path, so the faster can stay vmerge's default.
// usage: mpirun -np N vmerge-io-bench FILE SIZE_MIB BLOCK_MIB [pwrite|write_at|write_at_all]
// (scripts/bench/bench_io_paths.sh runs each path in its own job, caches dropped in between,
// since one path's file deletion and writeback otherwise slow the next one down).
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Share {
    uint64_t offset, size, block;
};

double timed(MPI_Comm comm, const std::function<void()>& body) {
    MPI_Barrier(comm);
    const double start = now();
    body();
    MPI_Barrier(comm);
    return now() - start;
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 4 && argc != 5) {
        if (rank == 0) std::fprintf(stderr, "usage: vmerge-io-bench FILE SIZE_MIB BLOCK_MIB [pwrite|write_at|write_at_all]\n");
        MPI_Finalize();
        return 2;
    }
    const std::string path = argv[1];
    const uint64_t total = std::strtoull(argv[2], nullptr, 10) << 20;
    const uint64_t block = std::strtoull(argv[3], nullptr, 10) << 20;
    const uint64_t share = total / static_cast<uint64_t>(size);
    const Share mine{share * static_cast<uint64_t>(rank), share, block};
    const std::string only = argc == 5 ? argv[4] : "";
    auto wanted = [&](const char* path_name) { return only.empty() || only == path_name; };
    std::vector<char> data(block);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + static_cast<size_t>(rank));

    auto prepare = [&] {
        if (rank == 0) {
            ::unlink(path.c_str());
            const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(total)) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
            ::close(fd);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    };
    const uint64_t blocks = (mine.size + block - 1) / block;
    uint64_t max_blocks = blocks;
    MPI_Allreduce(&blocks, &max_blocks, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);

    double posix = 0, independent = 0, collective = 0;
    if (wanted("pwrite")) prepare();
    if (wanted("pwrite")) posix = timed(MPI_COMM_WORLD, [&] {
        const int fd = ::open(path.c_str(), O_WRONLY);
        for (uint64_t done = 0; done < mine.size; done += block) {
            const size_t n = static_cast<size_t>(std::min(block, mine.size - done));
            if (::pwrite(fd, data.data(), n, static_cast<off_t>(mine.offset + done)) != static_cast<ssize_t>(n))
                MPI_Abort(MPI_COMM_WORLD, 1);
        }
        ::fsync(fd);
        ::close(fd);
    });

    if (wanted("write_at")) prepare();
    if (wanted("write_at")) independent = timed(MPI_COMM_WORLD, [&] {
        MPI_File fh;
        MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
        for (uint64_t done = 0; done < mine.size; done += block) {
            const int n = static_cast<int>(std::min(block, mine.size - done));
            MPI_File_write_at(fh, static_cast<MPI_Offset>(mine.offset + done), data.data(), n, MPI_BYTE, MPI_STATUS_IGNORE);
        }
        MPI_File_sync(fh);
        MPI_File_close(&fh);
    });

    if (wanted("write_at_all")) prepare();
    if (wanted("write_at_all")) collective = timed(MPI_COMM_WORLD, [&] {
        MPI_File fh;
        MPI_File_open(MPI_COMM_WORLD, path.c_str(), MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
        // Every rank joins every collective call, with 0 bytes once its share is done.
        for (uint64_t i = 0; i < max_blocks; ++i) {
            const uint64_t done = i * block;
            const int n = done < mine.size ? static_cast<int>(std::min(block, mine.size - done)) : 0;
            MPI_File_write_at_all(fh, static_cast<MPI_Offset>(mine.offset + std::min(done, mine.size)), data.data(), n,
                                  MPI_BYTE, MPI_STATUS_IGNORE);
        }
        MPI_File_sync(fh);
        MPI_File_close(&fh);
    });
    ::unlink(path.c_str());
    if (rank == 0) {
        const double gb = static_cast<double>(share * static_cast<uint64_t>(size)) / 1e9;
        if (only.empty()) std::printf("| path | ranks | seconds | GB/s |\n|---|---:|---:|---:|\n");
        if (posix > 0) std::printf("| POSIX pwrite + fsync (vmerge) | %d | %.2f | %.2f |\n", size, posix, gb / posix);
        if (independent > 0)
            std::printf("| MPI_File_write_at + sync | %d | %.2f | %.2f |\n", size, independent, gb / independent);
        if (collective > 0)
            std::printf("| MPI_File_write_at_all + sync | %d | %.2f | %.2f |\n", size, collective, gb / collective);
    }
    MPI_Finalize();
    return 0;
}
