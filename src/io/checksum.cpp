#include "io/checksum.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t by value
#include <xxhash.h>

namespace vmerge {

uint64_t xxh64(const void* data, size_t size, uint64_t seed) { return XXH64(data, size, seed); }

struct Xxh64Stream::State {
    XXH64_state_t xxh;
};

Xxh64Stream::Xxh64Stream(uint64_t seed) : state_(std::make_unique<State>()) { XXH64_reset(&state_->xxh, seed); }

Xxh64Stream::~Xxh64Stream() = default;

void Xxh64Stream::reset(uint64_t seed) { XXH64_reset(&state_->xxh, seed); }

void Xxh64Stream::update(const void* data, size_t size) { XXH64_update(&state_->xxh, data, size); }

uint64_t Xxh64Stream::digest() const { return XXH64_digest(&state_->xxh); }

std::string hex64(uint64_t value) {
    static const char* digits = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, value >>= 4) s[i] = digits[value & 0xF];
    return s;
}

}  // namespace vmerge
