#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace vmerge {

// XXH64 (seed 0) of a byte range: fast enough to checksum every output byte as it is written,
// so `verify` can find a flipped byte and `--resume` can trust what an earlier run wrote.
// libxxhash's implementation (Debian's libxxhash-dev).
uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);

// The same XXH64 over bytes given in pieces: a block is hashed piece by piece as each piece is
// written, while it is still in the CPU cache, instead of in a second pass over memory.
class Xxh64Stream {
public:
    explicit Xxh64Stream(uint64_t seed = 0);
    ~Xxh64Stream();
    Xxh64Stream(const Xxh64Stream&) = delete;
    Xxh64Stream& operator=(const Xxh64Stream&) = delete;
    void reset(uint64_t seed = 0);
    void update(const void* data, size_t size);
    uint64_t digest() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};

std::string hex64(uint64_t value);

}  // namespace vmerge
