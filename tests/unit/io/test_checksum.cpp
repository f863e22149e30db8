// XXH64 as published (libxxhash), whole and in pieces: the values are the reference ones of the
// xxHash specification's test vectors, not recomputed here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/checksum.h"

namespace vmerge {
namespace {

TEST(Checksum, Xxh64MatchesThePublishedValues) {
    EXPECT_EQ(hex64(xxh64("", 0)), "ef46db3751d8e999");
    EXPECT_EQ(hex64(xxh64("abc", 3)), "44bc2cf5ad770999");
}

TEST(Checksum, PiecesHashAsTheWhole) {
    std::vector<unsigned char> bytes(1000003);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
    for (size_t piece : {1u, 7u, 32u, 4096u, 524288u}) {
        Xxh64Stream stream;
        for (size_t done = 0; done < bytes.size(); done += piece)
            stream.update(bytes.data() + done, std::min(piece, bytes.size() - done));
        EXPECT_EQ(stream.digest(), xxh64(bytes.data(), bytes.size())) << piece;
    }
}

TEST(Checksum, ResetStartsAnotherHash) {
    Xxh64Stream stream;
    stream.update("xyz", 3);
    stream.reset();
    stream.update("abc", 3);
    EXPECT_EQ(hex64(stream.digest()), "44bc2cf5ad770999");
}

}  // namespace
}  // namespace vmerge
