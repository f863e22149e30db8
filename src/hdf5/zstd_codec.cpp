#include "hdf5/zstd_codec.h"

#include <string>

#include <zstd.h>

#include "core/error.h"

namespace vmerge {

size_t zstd_frame_bound(size_t size) { return ZSTD_compressBound(size); }

size_t zstd_compress_frame(const void* data, size_t size, void* out, size_t capacity, int level) {
    // ZSTD_compress is the one-shot API: the frame header always carries the content size.
    const size_t n = ZSTD_compress(out, capacity, data, size, level);
    if (ZSTD_isError(n)) throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    return n;
}

ZstdFrameCompressor::ZstdFrameCompressor(int level) : level_(level), context_(ZSTD_createCCtx()) {
    if (!context_) throw Error("zstd: cannot allocate a compression context");
}

ZstdFrameCompressor::~ZstdFrameCompressor() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(context_)); }

size_t ZstdFrameCompressor::compress(const void* data, size_t size, void* out, size_t capacity) {
    // ZSTD_compressCCtx is ZSTD_compress with the context supplied: the same parameters from
    // the level alone, the same one-shot frame with its content size.
    const size_t n = ZSTD_compressCCtx(static_cast<ZSTD_CCtx*>(context_), out, capacity, data, size, level_);
    if (ZSTD_isError(n)) throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    return n;
}

uint64_t zstd_frame_content_size(const void* frame, size_t size) {
    const unsigned long long n = ZSTD_getFrameContentSize(frame, size);
    if (n == ZSTD_CONTENTSIZE_ERROR) throw Error("zstd: not a zstd frame (" + std::to_string(size) + " bytes)");
    if (n == ZSTD_CONTENTSIZE_UNKNOWN)
        throw Error("zstd: the frame does not record its decompressed size (written with the streaming API?)");
    return n;
}

void zstd_decompress_frame(const void* frame, size_t size, void* out, uint64_t content_size) {
    const size_t n = ZSTD_decompress(out, content_size, frame, size);
    if (ZSTD_isError(n)) throw Error(std::string("zstd decompression failed: ") + ZSTD_getErrorName(n));
    if (n != content_size)
        throw Error("zstd: frame decompressed to " + std::to_string(n) + " bytes, its header says " +
                    std::to_string(content_size));
}

void zstd_decode_chunk(const void* frame, size_t size, void* out, uint64_t chunk_bytes) {
    const uint64_t recorded = zstd_frame_content_size(frame, size);
    if (recorded != chunk_bytes)
        throw Error("zstd: the frame records " + std::to_string(recorded) + " decompressed bytes, expected exactly " +
                    std::to_string(chunk_bytes) + " (the chunk's size)");
    // One frame and nothing after it: ZSTD_decompress would decode concatenated frames too.
    const size_t first = ZSTD_findFrameCompressedSize(frame, size);
    if (ZSTD_isError(first))
        throw Error("zstd: the " + std::to_string(size) + " stored bytes are not one whole frame (" +
                    ZSTD_getErrorName(first) + ")");
    if (first != size)
        throw Error("zstd: the stored bytes hold a frame of " + std::to_string(first) + " bytes and " +
                    std::to_string(size - first) + " bytes after it, expected exactly one frame");
    zstd_decompress_frame(frame, size, out, chunk_bytes);
}

}  // namespace vmerge
