#include "rank_resources.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <sys/resource.h>
#include <unistd.h>

#include "core/bounded_number.h"

namespace vmerge {

// --max-memory auto: a quarter of the memory this node gives the job (physical RAM, or the
// cgroup limit when lower), shared by the ranks on the node, and at most half of what Slurm
// grants one rank (SLURM_MEM_PER_CPU); within 64 MiB .. 4 GiB (beyond that blocks are large
// enough that I/O, not memory, sets the pace).
uint64_t default_max_memory(const Comm& comm) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    uint64_t ram = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : (8ull << 30);
    std::ifstream cgroup("/sys/fs/cgroup/memory.max");
    std::string limit;
    if (cgroup >> limit && !limit.empty() && std::isdigit(static_cast<unsigned char>(limit[0])))
        ram = std::min<uint64_t>(ram, parse_int_within(limit, 0, INT64_MAX).value_or(ram));
    uint64_t share = ram / 4 / static_cast<uint64_t>(std::max(1, comm.local_size()));
    if (const char* per_cpu = std::getenv("SLURM_MEM_PER_CPU")) {
        const char* cpus = std::getenv("SLURM_CPUS_PER_TASK");
        // Both bounded (MiB per CPU up to 1 PiB, 4096 CPUs), so the product cannot wrap.
        const uint64_t per_rank = static_cast<uint64_t>(parse_int_within(per_cpu, 0, int64_t{1} << 30).value_or(0)) *
                                  static_cast<uint64_t>(cpus ? parse_int_within(cpus, 1, 4096).value_or(1) : 1) << 20;
        if (per_rank > 0) share = std::min(share, per_rank / 2);
    }
    return std::clamp<uint64_t>(share, 64ull << 20, 4ull << 30);
}

int compute_threads(const Comm& comm) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / std::max(1, comm.local_size()));
}

uint64_t max_memory(const Options& o, const Comm& comm) {
    if (o.max_memory) return o.max_memory;
    const uint64_t automatic = default_max_memory(comm);
    return o.low_cpu_mem_usage ? std::min<uint64_t>(automatic, 256ull << 20) : automatic;
}

PageCacheChoice page_cache_choice(const Options& o, const Comm& comm, const TensorMapping& mapping) {
    uint64_t bytes = 0;
    for (const auto& t : mapping.tensors)
        bytes += static_cast<uint64_t>(numel(t.shape)) * (element_size(t.source_dtype) + element_size(t.dtype));
    const uint64_t node_bytes = bytes / static_cast<uint64_t>(comm.size()) * static_cast<uint64_t>(comm.local_size());
    return choose_page_cache(o.page_cache, node_bytes, available_memory_bytes());
}

uint64_t peak_rss_bytes() {
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<uint64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace vmerge
