#include "io/s3_xml.h"

#include <expat.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <memory>

#include "core/error.h"

namespace vmerge {
namespace {

struct LeafCollector {
    std::vector<std::string> path;
    std::string text;
    XmlLeaves leaves;
};

std::string local_name(const XML_Char* name) {
    const std::string full(name);
    const size_t separator = full.rfind('|');  // expat joins "namespace|local"
    return separator == std::string::npos ? full : full.substr(separator + 1);
}

void on_start(void* data, const XML_Char* name, const XML_Char**) {
    auto* c = static_cast<LeafCollector*>(data);
    c->path.push_back(local_name(name));
    c->text.clear();
}

void on_end(void* data, const XML_Char*) {
    auto* c = static_cast<LeafCollector*>(data);
    std::string joined;
    for (const auto& part : c->path) joined += (joined.empty() ? "" : "/") + part;
    c->leaves.emplace_back(std::move(joined), std::move(c->text));
    c->text.clear();
    c->path.pop_back();
}

void on_text(void* data, const XML_Char* s, int length) { static_cast<LeafCollector*>(data)->text.append(s, length); }

}  // namespace

XmlLeaves parse_xml_leaves(const std::string& body, const std::string& what) {
    std::unique_ptr<XML_ParserStruct, void (*)(XML_Parser)> parser(XML_ParserCreateNS(nullptr, '|'), XML_ParserFree);
    if (!parser) throw Error(what + ": cannot create an XML parser");
    LeafCollector collector;
    XML_SetUserData(parser.get(), &collector);
    XML_SetElementHandler(parser.get(), on_start, on_end);
    XML_SetCharacterDataHandler(parser.get(), on_text);
    if (XML_Parse(parser.get(), body.data(), static_cast<int>(body.size()), 1) != XML_STATUS_OK)
        throw Error(what + ": the response is not well-formed XML (" + XML_ErrorString(XML_GetErrorCode(parser.get())) +
                    " at line " + std::to_string(XML_GetCurrentLineNumber(parser.get())) + ")");
    return std::move(collector.leaves);
}

namespace {

// An object's LastModified, ISO 8601 in UTC ("2026-12-03T05:23:41.000Z"), as seconds since the
// epoch; the fraction is dropped.
int64_t utc_seconds(const std::string& text, const std::string& what) {
    std::tm t{};
    char zone = 0;
    int consumed = 0;
    if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                    &t.tm_sec, &consumed) != 6 ||
        t.tm_mon < 1 || t.tm_mon > 12 || t.tm_mday < 1 || t.tm_mday > 31 || t.tm_hour > 23 || t.tm_min > 59 ||
        t.tm_sec > 60)
        throw Error(what + ": LastModified '" + text.substr(0, 40) + "' is not an ISO 8601 time");
    size_t rest = static_cast<size_t>(consumed);
    if (rest < text.size() && text[rest] == '.')
        while (++rest < text.size() && std::isdigit(static_cast<unsigned char>(text[rest]))) {
        }
    zone = rest < text.size() ? text[rest] : 0;
    if (zone != 'Z' || rest + 1 != text.size())
        throw Error(what + ": LastModified '" + text.substr(0, 40) + "' is not a UTC time ending in Z");
    t.tm_year -= 1900;
    t.tm_mon -= 1;
    return static_cast<int64_t>(::timegm(&t));
}

}  // namespace

ObjectListingPage parse_listing_page(const std::string& body, const std::string& what) {
    ObjectListingPage page;
    bool truncated = false;
    ObjectListingPage::Object current;
    for (const auto& [path, text] : parse_xml_leaves(body, what)) {
        if (path == "ListBucketResult/Contents/Key") {
            current.key = text;
        } else if (path == "ListBucketResult/Contents/Size") {
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current.size);
            if (ec != std::errc() || end != text.data() + text.size())
                throw Error(what + ": object size '" + text + "' is not a number");
        } else if (path == "ListBucketResult/Contents/LastModified") {
            current.modified_seconds = utc_seconds(text, what);
        } else if (path == "ListBucketResult/Contents") {
            page.objects.push_back(std::move(current));
            current = {};
        } else if (path == "ListBucketResult/CommonPrefixes/Prefix") {
            page.common_prefixes.push_back(text);
        } else if (path == "ListBucketResult/IsTruncated") {
            truncated = text == "true";
        } else if (path == "ListBucketResult/NextContinuationToken") {
            page.next_continuation_token = text;
        }
    }
    if (truncated && page.next_continuation_token.empty())
        throw Error(what + ": the listing is truncated but has no NextContinuationToken");
    if (!truncated) page.next_continuation_token.clear();
    return page;
}

std::string s3_error_text(const std::string& body) {
    if (body.find("<Error") == std::string::npos) return "";
    try {
        std::string code, message;
        for (const auto& [path, text] : parse_xml_leaves(body, "error")) {
            if (path == "Error/Code") code = text;
            if (path == "Error/Message") message = text;
        }
        return message.empty() ? code : code + ": " + message;
    } catch (const Error&) {
        return "";
    }
}

}  // namespace vmerge
