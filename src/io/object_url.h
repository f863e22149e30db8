#pragma once
#include <string>
#include <string_view>

namespace vmerge {

// An object in an S3-compatible store, named by a URL "s3://bucket/key". vmerge takes such a
// URL wherever it takes an input path; the key may be empty (the bucket itself) and a folder
// is a key prefix ending before a '/'.
struct ObjectUrl {
    std::string bucket;
    std::string key;  // without a leading '/'

    std::string text() const { return "s3://" + bucket + (key.empty() ? "" : "/" + key); }
};

// Whether `path` names an object ("s3://...") rather than a local file.
bool is_object_url(std::string_view path);

// Splits "s3://bucket/key"; Error naming the URL when it has no bucket. A trailing '/' is
// dropped, so "s3://b/run/" and "s3://b/run" name the same folder.
ObjectUrl parse_object_url(const std::string& url);

// Why `key` is not a plain object key, or "" when it is. A '.' or '..' segment is one: HTTP
// clients and some stores resolve it (curl removes dot segments from a URL's path), so the
// request would reach another object than the one named — outside a target prefix, for one.
// An empty segment (a doubled '/') is one too. Every request checks its key with this.
std::string object_key_problem(std::string_view key);

// S3's URI encoding (SigV4): every byte but A-Z a-z 0-9 - _ . ~ as %XX with upper-case hex;
// '/' kept as it is when `keep_slash` (an object key in a path), encoded otherwise (a query value).
std::string aws_uri_encode(std::string_view text, bool keep_slash);

}  // namespace vmerge
