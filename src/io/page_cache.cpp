#include "io/page_cache.h"

#include <algorithm>
#include <fstream>
#include <optional>

#include "core/bounded_number.h"
#include "core/error.h"
#include "core/human_units.h"

namespace vmerge {
namespace {

// A whole number of bytes from a one-line file ("max" or unreadable: nullopt).
std::optional<uint64_t> file_number(const char* path) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text)) return std::nullopt;
    const auto value = parse_int_within(text, 0, INT64_MAX);
    return value ? std::optional<uint64_t>(static_cast<uint64_t>(*value)) : std::nullopt;
}

}  // namespace

PageCacheChoice choose_page_cache(const std::string& flag, uint64_t node_bytes, uint64_t available_bytes) {
    if (flag == "keep") return {PageCachePolicy::Keep, "--page_cache keep"};
    if (flag == "evict") return {PageCachePolicy::Evict, "--page_cache evict"};
    if (flag != "auto") throw Error("--page_cache " + flag + ": expected auto, keep or evict");
    const std::string sizes = human_bytes(node_bytes) + " read and written on this node, " +
                              (available_bytes ? human_bytes(available_bytes) : std::string("unknown")) + " available";
    if (available_bytes && node_bytes > available_bytes)
        return {PageCachePolicy::Evict, "auto: " + sizes + "; does not fit, so evicted behind the merge"};
    return {PageCachePolicy::Keep, "auto: " + sizes + "; fits, so kept in the page cache"};
}

uint64_t available_memory_bytes() {
    uint64_t available = 0;
    std::ifstream meminfo("/proc/meminfo");
    std::string key, unit;
    uint64_t kib = 0;
    while (meminfo >> key >> kib) {
        std::getline(meminfo, unit);
        if (key == "MemAvailable:") {
            available = kib * 1024;
            break;
        }
    }
    const auto limit = file_number("/sys/fs/cgroup/memory.max");
    const auto used = file_number("/sys/fs/cgroup/memory.current");
    if (limit && used) {
        const uint64_t room = *limit > *used ? *limit - *used : 0;
        available = available ? std::min(available, room) : room;
    }
    return available;
}

const char* page_cache_name(PageCachePolicy policy) { return policy == PageCachePolicy::Keep ? "keep" : "evict"; }

}  // namespace vmerge
