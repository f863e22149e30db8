#include "hdf5/h5z_zstd_filter.h"

#include <cstdlib>
#include <cstring>

#include "hdf5/zstd_codec.h"

namespace vmerge {
namespace {

// HDF5 chunks are below 4 GiB: a frame claiming more is not one of a chunk, and is refused
// before its claimed size is allocated. (The filter is not told the chunk's size; vmerge's own
// reader does not decode through it, it checks each frame against its chunk: zstd_decode_chunk.)
constexpr uint64_t kLargestChunkBytes = (4ull << 30) - 1;

// HDF5 owns *buf (malloc'd); on success it gets a new buffer and the old one is freed. A
// failure returns 0, which HDF5 reports as a filter error; no exception crosses into C.
size_t zstd_filter(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                   size_t* buf_size, void** buf) {
    void* out = nullptr;
    try {
        size_t out_size = 0;
        if (flags & H5Z_FLAG_REVERSE) {
            const uint64_t content = zstd_frame_content_size(*buf, nbytes);
            if (content > kLargestChunkBytes) return 0;
            out = std::malloc(content ? content : 1);
            if (!out) return 0;
            zstd_decompress_frame(*buf, nbytes, out, content);
            out_size = content;
        } else {
            // Signed, as the HDFGroup plugin reads it (negative levels are two's complement).
            const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : kZstdDefaultLevel;
            const size_t capacity = zstd_frame_bound(nbytes);
            out = std::malloc(capacity);
            if (!out) return 0;
            out_size = zstd_compress_frame(*buf, nbytes, out, capacity, level);
        }
        std::free(*buf);
        *buf = out;
        *buf_size = out_size;
        return out_size;
    } catch (...) {
        std::free(out);
        return 0;
    }
}

const H5Z_class2_t kZstdClass = {
    H5Z_CLASS_T_VERS,
    kZstdFilterId,
    1,  // encoder present
    1,  // decoder present
    "zstd (vmerge, HDF5 registered filter 32015)",
    nullptr,  // can_apply
    nullptr,  // set_local
    zstd_filter,
};

}  // namespace

const H5Z_class2_t* zstd_filter_class() { return &kZstdClass; }

}  // namespace vmerge
