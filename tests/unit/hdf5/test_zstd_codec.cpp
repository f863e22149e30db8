// The zstd codec of hdf5/zstd_codec.h: frames other zstd decoders read, and a stored chunk checked
// against its frame before it is decoded (archives are untrusted input).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <zstd.h>

#include "core/error.h"
#include "hdf5/zstd_codec.h"
#include "hdf5/zstd_samples.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::sample_bytes;
using testing::frame_of;
using testing::frame_claiming;

using testing::contains;
TEST(ZstdCodec, RoundTripRecordsContentSize) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 20}) {
        const auto data = sample_bytes(n, 7);
        std::vector<unsigned char> frame(zstd_frame_bound(n));
        const size_t size = zstd_compress_frame(data.data(), n, frame.data(), frame.size(), 3);
        // What the HDFGroup plugin's decoder needs: the frame says how large it decompresses.
        EXPECT_EQ(ZSTD_getFrameContentSize(frame.data(), size), n);
        EXPECT_EQ(zstd_frame_content_size(frame.data(), size), n);
        std::vector<unsigned char> back(n);
        zstd_decompress_frame(frame.data(), size, back.data(), n);
        EXPECT_EQ(back, data);
    }
}

TEST(ZstdCodec, RejectsFramesWithoutContentSizeAndGarbage) {
    const auto data = sample_bytes(4096, 3);
    // A streaming-API frame records no content size.
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    std::vector<unsigned char> frame(zstd_frame_bound(data.size()));
    ZSTD_outBuffer out{frame.data(), frame.size(), 0};
    ZSTD_inBuffer in{data.data(), data.size(), 0};
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0);
    ASSERT_EQ(ZSTD_compressStream2(cctx, &out, &in, ZSTD_e_end), 0u);
    ZSTD_freeCCtx(cctx);
    EXPECT_THROW(zstd_frame_content_size(frame.data(), out.pos), Error);
    const unsigned char garbage[16] = {1, 2, 3};
    EXPECT_THROW(zstd_frame_content_size(garbage, sizeof garbage), Error);
}
std::string decode_error(const std::vector<unsigned char>& frame, uint64_t chunk_bytes) {
    std::vector<unsigned char> out(chunk_bytes);
    try {
        zstd_decode_chunk(frame.data(), frame.size(), out.data(), chunk_bytes);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(ZstdDecodeChunk, OnlyOneFrameOfExactlyTheChunkSize) {
    const std::vector<unsigned char> rows(96, 7);
    std::vector<unsigned char> out(96);
    const auto good = frame_of(rows);
    zstd_decode_chunk(good.data(), good.size(), out.data(), 96);
    EXPECT_EQ(out, rows);
    // A frame of fewer bytes than the chunk: HDF5's pipeline would leave the rest uninitialised.
    EXPECT_EQ(decode_error(frame_of(std::vector<unsigned char>(40, 1)), 96),
              "zstd: the frame records 40 decompressed bytes, expected exactly 96 (the chunk's size)");
    // A header claiming 1 GiB is refused from the header alone.
    EXPECT_EQ(decode_error(frame_claiming(1ull << 30), 96),
              "zstd: the frame records 1073741824 decompressed bytes, expected exactly 96 (the chunk's size)");
    // A second frame after the first (ZSTD_decompress would decode both).
    auto two = good;
    const auto extra = frame_of(std::vector<unsigned char>(8, 2));
    two.insert(two.end(), extra.begin(), extra.end());
    EXPECT_EQ(decode_error(two, 96), "zstd: the stored bytes hold a frame of " + std::to_string(good.size()) +
                                         " bytes and " + std::to_string(extra.size()) +
                                         " bytes after it, expected exactly one frame");
    // The right size in the header, a body cut short.
    auto cut = good;
    cut.resize(cut.size() - 3);
    EXPECT_TRUE(contains(decode_error(cut, 96), "zstd: the " + std::to_string(cut.size()) +
                                                    " stored bytes are not one whole frame"));
}

}  // namespace
}  // namespace vmerge
