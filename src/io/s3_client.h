#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "io/object_url.h"
#include "io/s3_settings.h"
#include "io/s3_xml.h"

namespace vmerge {

// Requests to an S3-compatible store through libcurl, signed with SigV4 by libcurl's
// CURLOPT_AWS_SIGV4. Debian 12's libcurl 7.88 signs the URL's path and query as they are
// given, so every URL is built already canonical (key encoded as aws_uri_encode does, query
// parameters sorted, encoded, "name=" for a parameter without a value), and the payload hash
// header is always sent by vmerge: the same signature on 7.88 and on later releases.
//
// Throttling (429, 503 SlowDown), other 5xx answers and transport failures are retried with
// exponential backoff, a bounded number of times; any other failure is one Error naming the
// operation, the s3:// URL and the HTTP status with the store's code and message. No message
// holds a secret: the keys are passed to libcurl only, and no request or header is logged.
class S3Client {
public:
    explicit S3Client(S3Settings settings);

    // The size of an object (HEAD); Error "s3://b/k: ... HTTP 404" when it is missing.
    uint64_t object_size(const ObjectUrl& object) const;
    // Exactly `length` bytes at `offset` (one ranged GET per call); Error naming the object when
    // the store answers with fewer bytes or another range.
    void read_range(const ObjectUrl& object, uint64_t offset, void* out, uint64_t length) const;
    // Every object under `prefix` (ListObjectsV2, all pages); with `delimiter` '/', the objects
    // directly under it and the next-level folders as common prefixes.
    ObjectListingPage list(const std::string& bucket, const std::string& prefix, bool delimited) const;

    // What this process asked of the store (for the measured figures in docs/performance.md).
    struct Traffic {
        std::atomic<uint64_t> requests{0};
        std::atomic<uint64_t> bytes_received{0};
        std::atomic<uint64_t> bytes_sent{0};
        std::atomic<uint64_t> retries{0};
    };
    const Traffic& traffic() const { return traffic_; }

    struct Request;
    struct Response {
        long status = 0;
        std::string body;     // the body, unless it went into the caller's buffer
        uint64_t delivered = 0;  // bytes written into the caller's buffer
        std::string etag;
        std::string content_range;
        uint64_t content_length = 0;
    };
    // One request with retries; Error for a final failure (status outside 2xx).
    Response perform(const Request& request) const;

private:
    Response perform_once(const Request& request) const;
    S3Settings settings_;
    mutable Traffic traffic_;
};

struct S3Client::Request {
    std::string method = "GET";  // GET, HEAD, PUT, POST, DELETE
    ObjectUrl object;            // key empty: a bucket request
    std::string query;           // canonical already (see above), without '?'
    std::vector<std::string> headers;  // "name: value", beyond host, x-amz-date and x-amz-content-sha256
    const char* body = nullptr;  // PUT/POST payload
    uint64_t body_size = 0;
    char* sink = nullptr;        // a ranged GET's destination, `sink_size` bytes
    uint64_t sink_size = 0;
    std::string what;            // the operation, for messages ("read 4096 bytes at offset 0 of")
    long answer_allowed = 0;     // a failure status returned as an answer, not an Error (412 of a conditional PUT)
};

// The process's client (settings from s3_settings()).
const S3Client& s3_client();

// The lower-case hex SHA-256 of `size` bytes (the x-amz-content-sha256 of a payload).
std::string sha256_hex(const void* data, size_t size);

}  // namespace vmerge
