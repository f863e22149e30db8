#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace vmerge {

// XXH64 (seed 0) of a byte range: fast enough to checksum every output byte as it is written,
// so `verify` can find a flipped byte and `--resume` can trust what an earlier run wrote.
uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

std::string hex64(uint64_t value);

}  // namespace vmerge
