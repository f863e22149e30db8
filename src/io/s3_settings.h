#pragma once
#include <functional>
#include <string>

namespace vmerge {

// Where requests to the object store go and how they are signed, taken as the AWS tools take
// them: the environment first, then the shared config and credentials files (profile from
// AWS_PROFILE, default "default"). Only these two sources: no web identity, container or
// instance-metadata credentials (docs/cluster.md says so; so does the error for missing keys).
struct S3Settings {
    std::string access_key_id;
    std::string secret_access_key;  // never printed
    std::string session_token;      // sent as x-amz-security-token when set; never printed
    std::string region = "us-east-1";
    // "scheme://host[:port]" of a custom endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
    // profile's endpoint_url), empty for AWS itself.
    std::string endpoint;
    // Path-style requests (endpoint/bucket/key): whenever a custom endpoint is set, as botocore's
    // "auto" addressing does, unless the profile's s3 addressing_style says virtual.
    bool path_style = false;
    // Where the keys came from ("the environment", "profile NAME of FILE"), for messages.
    std::string credentials_source;

    // "https://host[:port]" to send a request for `bucket` to, and the path prefix before the key.
    std::string base_url(const std::string& bucket) const;
    std::string path_prefix(const std::string& bucket) const;
};

// Reads the settings through `getenv` (the process environment by default); Error naming the
// file and line for a config file that cannot be parsed, or naming what to set when no
// credentials are found.
S3Settings load_s3_settings(const std::function<const char*(const char*)>& getenv);

// The process's settings, loaded on first use.
const S3Settings& s3_settings();

}  // namespace vmerge
