#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vmerge {

// The XML bodies of S3 responses, parsed with expat (Debian's libexpat): each element that holds
// text, as its path from the root ("ListBucketResult/Contents/Key") and its text, in document
// order. Namespaces are dropped (S3 puts every element in its one namespace). Error naming
// `what` for a body that is not well-formed XML.
using XmlLeaves = std::vector<std::pair<std::string, std::string>>;
XmlLeaves parse_xml_leaves(const std::string& body, const std::string& what);

// One page of ListObjectsV2.
struct ObjectListingPage {
    struct Object {
        std::string key;
        uint64_t size = 0;
        int64_t modified_seconds = 0;  // LastModified, seconds since the epoch (UTC)
    };
    std::vector<Object> objects;
    std::vector<std::string> common_prefixes;
    std::string next_continuation_token;  // empty on the last page
};
ObjectListingPage parse_listing_page(const std::string& body, const std::string& what);

// "Code: Message" of an S3 <Error> body, or "" when the body is not one.
std::string s3_error_text(const std::string& body);

}  // namespace vmerge
