// SequentialBlockHash (exec/sequential_block_hash.h): a block's XXH64 however its bytes landed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "exec/sequential_block_hash.h"
#include "io/checksum.h"

namespace vmerge {
namespace {

// The block's hash is that of its final bytes however it was filled.
TEST(SequentialBlockHash, EqualsTheWholeBlocksHashHoweverItWasFilled) {
    std::vector<unsigned char> block(4096), span(512);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<unsigned char>(i * 31 + 7);
    const uint64_t want = xxh64(block.data(), block.size());
    SequentialBlockHash hash;
    hash.begin(block.data(), block.size());  // read in order, piece after piece
    for (size_t at = 0; at < block.size(); at += 1000) hash.landed(block.data() + at, std::min<size_t>(1000, 4096 - at));
    EXPECT_EQ(hash.finish(), want);
    hash.begin(block.data(), block.size());  // out of order: the second piece first
    hash.landed(block.data() + 2048, 2048);
    hash.landed(block.data(), 2048);
    EXPECT_EQ(hash.finish(), want);
    hash.begin(block.data(), block.size());  // a read into a span buffer, gathered into the block
    hash.landed(block.data(), 1024);
    hash.landed(span.data(), span.size());
    hash.disturb();
    hash.landed(block.data() + 1024, 3072);
    EXPECT_EQ(hash.finish(), want);
    hash.begin(block.data(), block.size());  // only part read (the rest zero-filled)
    hash.landed(block.data(), 1024);
    EXPECT_EQ(hash.finish(), want);
    hash.begin(block.data(), 1024);  // a read running past the block's end
    hash.landed(block.data(), 2048);
    EXPECT_EQ(hash.finish(), xxh64(block.data(), 1024));
    hash.landed(block.data(), 16);  // after finish: ignored
}

}  // namespace
}  // namespace vmerge
