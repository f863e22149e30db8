// The ETag --resume compares a held part with (io/s3_multipart.h): S3's quoted hex MD5.
#include <gtest/gtest.h>

#include <string>

#include "io/s3_multipart.h"

namespace vmerge {
namespace {

TEST(S3Multipart, Md5EtagIsTheQuotedHexDigest) {
    EXPECT_EQ(md5_etag(nullptr, 0), "\"d41d8cd98f00b204e9800998ecf8427e\"");
    const std::string text = "The quick brown fox jumps over the lazy dog";
    EXPECT_EQ(md5_etag(reinterpret_cast<const unsigned char*>(text.data()), text.size()),
              "\"9e107d9d372bb6826bd81d3542a419d6\"");
}

}  // namespace
}  // namespace vmerge
