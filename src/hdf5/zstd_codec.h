#pragma once
#include <cstddef>
#include <cstdint>

namespace vmerge {

// The codec of the HDF5 zstd filter (registered ID 32015): every chunk is one complete zstd
// frame that records its decompressed size, which is what the HDFGroup plugin's decoder
// requires. Pure libzstd: no HDF5, no MPI, so the filter plugin and the tests can use it alone.

// Levels accepted on the command line: 1..22 are what every reader's plugin handles (negative
// levels only since hdf5plugin 7).
constexpr int kZstdMinLevel = 1;
constexpr int kZstdMaxLevel = 22;
constexpr int kZstdDefaultLevel = 3;

size_t zstd_frame_bound(size_t size);
// Compresses `size` bytes into `out` (capacity at least zstd_frame_bound(size)); returns the
// frame's length. Throws Error.
size_t zstd_compress_frame(const void* data, size_t size, void* out, size_t capacity, int level);

// The same frames as zstd_compress_frame, from one compression context kept across calls
// (ZSTD_compress makes and frees one per call: a fresh workspace, and its page faults, per
// chunk). One thread at a time.
class ZstdFrameCompressor {
public:
    explicit ZstdFrameCompressor(int level);
    ~ZstdFrameCompressor();
    ZstdFrameCompressor(const ZstdFrameCompressor&) = delete;
    ZstdFrameCompressor& operator=(const ZstdFrameCompressor&) = delete;
    // As zstd_compress_frame. Throws Error.
    size_t compress(const void* data, size_t size, void* out, size_t capacity);

private:
    int level_;
    void* context_;  // ZSTD_CCtx
};
// The decompressed size a frame records. Throws Error for a frame without one (streaming API).
uint64_t zstd_frame_content_size(const void* frame, size_t size);
// Decompresses one frame into exactly `content_size` bytes. Throws Error.
void zstd_decompress_frame(const void* frame, size_t size, void* out, uint64_t content_size);

// The stored bytes of one chunk of `chunk_bytes` into `out` (that many bytes): they must be
// exactly one frame that records `chunk_bytes` as its decompressed size and decodes to exactly
// that. The recorded size is checked first, so a frame claiming more (or less) is refused before
// anything is decoded or allocated. Throws Error saying what the frame holds and what was expected.
void zstd_decode_chunk(const void* frame, size_t size, void* out, uint64_t chunk_bytes);

}  // namespace vmerge
