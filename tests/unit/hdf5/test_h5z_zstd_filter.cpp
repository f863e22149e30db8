// The HDF5 zstd filter (hdf5/h5z_zstd_filter.h): it compresses and decompresses in HDF5's buffer,
// and refuses a frame that claims more than an HDF5 chunk.
#include <gtest/gtest.h>

#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <zstd.h>

#include "hdf5/h5z_zstd_filter.h"
#include "hdf5/zstd_samples.h"

namespace vmerge {
namespace {

using testing::sample_bytes;
using testing::frame_claiming;
TEST(ZstdFilter, CompressesAndDecompressesInHdf5sBuffer) {
    const H5Z_class2_t* filter = zstd_filter_class();
    EXPECT_EQ(filter->id, 32015);
    const auto data = sample_bytes(50000, 11);
    size_t buf_size = data.size();
    void* buf = std::malloc(buf_size);
    std::memcpy(buf, data.data(), data.size());
    const unsigned level = 5;
    const size_t compressed = filter->filter(0, 1, &level, data.size(), &buf_size, &buf);
    ASSERT_GT(compressed, 0u);
    EXPECT_LT(compressed, data.size());
    // An independent decoder reads the chunk as stored.
    std::vector<unsigned char> check(data.size());
    EXPECT_EQ(ZSTD_decompress(check.data(), check.size(), buf, compressed), data.size());
    EXPECT_EQ(check, data);
    const size_t restored = filter->filter(H5Z_FLAG_REVERSE, 1, &level, compressed, &buf_size, &buf);
    ASSERT_EQ(restored, data.size());
    EXPECT_EQ(std::memcmp(buf, data.data(), data.size()), 0);
    // A damaged chunk is a filter failure (0), not a crash.
    std::memset(buf, 0xAB, 16);
    EXPECT_EQ(filter->filter(H5Z_FLAG_REVERSE, 1, &level, 16, &buf_size, &buf), 0u);
    std::free(buf);
}

TEST(ZstdFilter, RefusesAFrameClaimingMoreThanAnHdf5Chunk) {
    const H5Z_class2_t* filter = zstd_filter_class();
    const auto claim = frame_claiming(5ull << 30);
    size_t buf_size = claim.size();
    void* buf = std::malloc(buf_size);
    std::memcpy(buf, claim.data(), claim.size());
    const unsigned level = 3;
    EXPECT_EQ(filter->filter(H5Z_FLAG_REVERSE, 1, &level, claim.size(), &buf_size, &buf), 0u);
    EXPECT_EQ(buf_size, claim.size());  // HDF5's buffer untouched, nothing of 5 GiB allocated
    std::free(buf);
}

}  // namespace
}  // namespace vmerge
