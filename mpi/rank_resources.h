#pragma once
#include <cstdint>

#include "command_line.h"
#include "comm.h"
#include "io/page_cache.h"
#include "core/tensor_mapping.h"

namespace vmerge {

// --max-memory of one rank: the flag, or the automatic share (default_max_memory), which
// --low_cpu_mem_usage caps at 256 MiB.
uint64_t max_memory(const Options& o, const Comm& comm);

// --max-memory auto: a quarter of the memory this node gives the job, shared by its ranks,
// at most half of what Slurm grants one rank; within 64 MiB .. 4 GiB.
uint64_t default_max_memory(const Comm& comm);

// Threads a rank may use for LoRA products: its share of the node's cores.
int compute_threads(const Comm& comm);

// --page_cache for this node: the bytes its ranks read and write (their share of the merge)
// against the memory it has available.
PageCacheChoice page_cache_choice(const Options& o, const Comm& comm, const TensorMapping& mapping);

// This process's peak resident memory.
uint64_t peak_rss_bytes();

}  // namespace vmerge
