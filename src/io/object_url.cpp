#include "io/object_url.h"

#include "core/error.h"

namespace vmerge {

bool is_object_url(std::string_view path) { return path.starts_with("s3://"); }

ObjectUrl parse_object_url(const std::string& url) {
    if (!is_object_url(url)) throw Error(url + ": not an s3:// URL");
    std::string rest = url.substr(5);
    while (rest.ends_with('/')) rest.pop_back();
    const size_t slash = rest.find('/');
    ObjectUrl out;
    out.bucket = rest.substr(0, slash);
    if (slash != std::string::npos) out.key = rest.substr(slash + 1);
    if (out.bucket.empty()) throw Error(url + ": no bucket name (expected s3://BUCKET/KEY)");
    if (const std::string why = object_key_problem(out.key); !why.empty()) throw Error(url + ": " + why);
    return out;
}

std::string object_key_problem(std::string_view key) {
    if (key.empty()) return "";
    size_t start = 0;
    while (true) {
        const size_t slash = key.find('/', start);
        const std::string_view part = key.substr(start, slash == std::string_view::npos ? key.npos : slash - start);
        const bool last = slash == std::string_view::npos;
        if (part.empty() && !last) return "an empty folder name in the key (a doubled or leading '/')";
        if (part == "." || part == "..")
            return "a '" + std::string(part) + "' segment in the key (refused: it could resolve to another object)";
        if (last) return "";
        start = slash + 1;
    }
}

std::string aws_uri_encode(std::string_view text, bool keep_slash) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        const bool unreserved = (byte >= 'A' && byte <= 'Z') || (byte >= 'a' && byte <= 'z') ||
                                (byte >= '0' && byte <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
        if (unreserved || (keep_slash && c == '/')) {
            out += c;
        } else {
            out += '%';
            out += kHex[byte >> 4];
            out += kHex[byte & 15];
        }
    }
    return out;
}

}  // namespace vmerge
