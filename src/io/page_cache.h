#pragma once
#include <cstdint>
#include <string>

namespace vmerge {

// Whether a merge keeps what it reads and writes in the page cache. A merge reads every input
// byte once and writes every output byte once, so caching them helps nobody within the merge;
// but a user who merges again, evaluates the output, or cps the checkpoint next expects the
// bytes to still be cached, and evicting them turns the next warm run into a cold one. Only
// when the node's share of the merge does not fit in the memory it has free does keeping them
// push out everything else on the node; then reads and durable writes are evicted behind us.
enum class PageCachePolicy { Keep, Evict };

struct PageCacheChoice {
    PageCachePolicy policy = PageCachePolicy::Keep;
    std::string reason;  // for inspect and the summary: why this policy
};

// `flag` is --page_cache (auto | keep | evict); `node_bytes` the bytes this node's ranks read
// and write; `available_bytes` the node's available memory (0: unknown, taken as fitting).
PageCacheChoice choose_page_cache(const std::string& flag, uint64_t node_bytes, uint64_t available_bytes);

// MemAvailable from /proc/meminfo, lowered to the cgroup's memory.max less its usage when that
// is smaller; 0 when neither can be read.
uint64_t available_memory_bytes();

const char* page_cache_name(PageCachePolicy policy);

}  // namespace vmerge
