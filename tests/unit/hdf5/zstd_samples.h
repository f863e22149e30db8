#pragma once
// Bytes and zstd frames for the HDF5 and zstd tests.
#include <cstdint>
#include <random>
#include <vector>

#include <zstd.h>

namespace vmerge::testing {

inline std::vector<unsigned char> sample_bytes(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> out(n);
    // A quarter random, the rest slowly changing: compressible, but not trivially.
    for (size_t i = 0; i < n; ++i)
        out[i] = i % 4 == 0 ? static_cast<unsigned char>(rng()) : static_cast<unsigned char>(i / 256);
    return out;
}

inline std::vector<unsigned char> frame_of(const std::vector<unsigned char>& data) {
    std::vector<unsigned char> frame(ZSTD_compressBound(data.size()));
    frame.resize(ZSTD_compress(frame.data(), frame.size(), data.data(), data.size(), 3));
    return frame;
}

// A frame header recording `size` decompressed bytes (8-byte field, single segment), then one
// empty last raw block: what a hostile archive needs to claim any size in 16 bytes.
inline std::vector<unsigned char> frame_claiming(uint64_t size) {
    std::vector<unsigned char> f = {0x28, 0xB5, 0x2F, 0xFD, 0xE0};
    for (int i = 0; i < 8; ++i) f.push_back(static_cast<unsigned char>(size >> (8 * i)));
    f.insert(f.end(), {1, 0, 0});
    return f;
}

}  // namespace vmerge::testing
