#include "io/s3_multipart.h"

#include <openssl/evp.h>

#include <charconv>

#include "core/error.h"
#include "io/s3_xml.h"

namespace vmerge {
namespace {

std::string hex(const unsigned char* bytes, size_t size) {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < size; ++i) {
        out += kHex[bytes[i] >> 4];
        out += kHex[bytes[i] & 15];
    }
    return out;
}

void md5(const unsigned char* data, uint64_t size, unsigned char out[16]) {
    unsigned int length = 0;
    if (EVP_Digest(data, size, out, &length, EVP_md5(), nullptr) != 1 || length != 16)
        throw Error("cannot compute an MD5 digest (OpenSSL)");
}

uint64_t number_in(const std::string& text, const std::string& what) {
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) throw Error(what + ": '" + text + "' is not a number");
    return value;
}

// An element's path without its root: the root's name varies between stores (AWS answers
// ListParts with ListPartsResult, moto with ListPartsResponse) and says nothing the request did not.
std::string below_root(const std::string& path) {
    const size_t slash = path.find('/');
    return slash == std::string::npos ? "" : path.substr(slash + 1);
}

// "uploadId=..." and friends: SigV4 wants the query sorted and encoded (s3_client.h).
std::string upload_query(const std::string& upload_id) { return "uploadId=" + aws_uri_encode(upload_id, false); }

S3Client::Request request_for(const std::string& method, const ObjectUrl& object, std::string query, std::string what) {
    S3Client::Request request;
    request.method = method;
    request.object = object;
    request.query = std::move(query);
    request.what = std::move(what);
    return request;
}

// CompleteMultipartUpload may answer 200 and still fail (an <Error> body sent after the status).
void refuse_error_body(const S3Client::Response& response, const S3Client::Request& request) {
    const std::string store_says = s3_error_text(response.body);
    if (!store_says.empty()) throw Error(request.object.text() + ": cannot " + request.what + ": " + store_says);
}

}  // namespace

std::string md5_etag(const unsigned char* data, uint64_t size) {
    unsigned char digest[16];
    md5(data, size, digest);
    return "\"" + hex(digest, 16) + "\"";
}

void put_object(const S3Client& client, const ObjectUrl& object, const std::string& bytes) {
    auto request = request_for("PUT", object, "", "write " + std::to_string(bytes.size()) + " bytes (PUT)");
    request.body = bytes.data();
    request.body_size = bytes.size();
    refuse_error_body(client.perform(request), request);
}

bool put_object_if_absent(const S3Client& client, const ObjectUrl& object, const std::string& bytes) {
    auto request = request_for("PUT", object, "", "create it (PUT If-None-Match)");
    request.headers.push_back("if-none-match: *");
    request.body = bytes.data();
    request.body_size = bytes.size();
    request.answer_allowed = 412;  // Precondition Failed: the key exists
    const S3Client::Response response = client.perform(request);
    if (response.status == 412) return false;
    refuse_error_body(response, request);
    return true;
}

void delete_object(const S3Client& client, const ObjectUrl& object) {
    client.perform(request_for("DELETE", object, "", "delete it (DELETE)"));
}

std::string create_multipart_upload(const S3Client& client, const ObjectUrl& object) {
    auto request = request_for("POST", object, "uploads=", "start a multipart upload (CreateMultipartUpload)");
    request.headers.push_back("content-type: application/octet-stream");
    const auto response = client.perform(request);
    for (const auto& [path, text] : parse_xml_leaves(response.body, object.text() + ": CreateMultipartUpload"))
        if (below_root(path) == "UploadId" && !text.empty()) return text;
    throw Error(object.text() + ": cannot " + request.what + ": the answer holds no UploadId");
}

std::string upload_part(const S3Client& client, const ObjectUrl& object, const std::string& upload_id, int number,
                        const unsigned char* data, uint64_t size) {
    // Sorted: "partNumber" before "uploadId".
    auto request = request_for("PUT", object, "partNumber=" + std::to_string(number) + "&" + upload_query(upload_id),
                               "upload part " + std::to_string(number) + " (" + std::to_string(size) + " bytes, UploadPart)");
    unsigned char digest[16];
    md5(data, size, digest);
    unsigned char base64[32];
    EVP_EncodeBlock(base64, digest, 16);
    request.headers.push_back(std::string("content-md5: ") + reinterpret_cast<const char*>(base64));
    request.body = reinterpret_cast<const char*>(data);
    request.body_size = size;
    const auto response = client.perform(request);
    if (response.etag.empty()) throw Error(object.text() + ": cannot " + request.what + ": the answer has no ETag");
    return response.etag;
}

void complete_multipart_upload(const S3Client& client, const ObjectUrl& object, const std::string& upload_id,
                               const std::vector<UploadedPart>& parts) {
    std::string body = "<CompleteMultipartUpload>";
    for (const auto& part : parts)
        body += "<Part><PartNumber>" + std::to_string(part.number) + "</PartNumber><ETag>" + part.etag + "</ETag></Part>";
    body += "</CompleteMultipartUpload>";
    auto request = request_for("POST", object, upload_query(upload_id),
                               "complete the multipart upload of " + std::to_string(parts.size()) +
                                   " parts (CompleteMultipartUpload)");
    request.headers.push_back("content-type: application/xml");
    request.body = body.data();
    request.body_size = body.size();
    refuse_error_body(client.perform(request), request);
}

void abort_multipart_upload(const S3Client& client, const ObjectUrl& object, const std::string& upload_id) {
    client.perform(request_for("DELETE", object, upload_query(upload_id), "abort the multipart upload (AbortMultipartUpload)"));
}

std::vector<UploadedPart> list_parts(const S3Client& client, const ObjectUrl& object, const std::string& upload_id) {
    std::vector<UploadedPart> parts;
    std::string marker;
    for (;;) {
        const std::string query =
            (marker.empty() ? "" : "part-number-marker=" + marker + "&") + upload_query(upload_id);
        const auto response = client.perform(request_for("GET", object, query, "list the uploaded parts (ListParts)"));
        bool truncated = false;
        std::string next;
        UploadedPart part;
        const std::string what = object.text() + ": ListParts";
        for (const auto& [path, text] : parse_xml_leaves(response.body, what)) {
            const std::string field = below_root(path);
            if (field == "Part/PartNumber") part.number = static_cast<int>(number_in(text, what));
            else if (field == "Part/Size") part.size = number_in(text, what);
            else if (field == "Part/ETag") part.etag = text;
            else if (field == "Part") parts.push_back(std::exchange(part, {}));
            else if (field == "IsTruncated") truncated = text == "true";
            else if (field == "NextPartNumberMarker") next = text;
        }
        if (!truncated) return parts;
        if (next.empty() || next == marker) throw Error(what + ": the listing is truncated but names no next part");
        marker = next;
    }
}

std::vector<OpenUpload> list_multipart_uploads(const S3Client& client, const std::string& bucket,
                                               const std::string& prefix) {
    std::vector<OpenUpload> uploads;
    std::string key_marker, id_marker;
    const std::string what = "s3://" + bucket + ": ListMultipartUploads of '" + prefix + "'";
    for (;;) {
        std::string query;  // sorted by name
        if (!key_marker.empty()) query += "key-marker=" + aws_uri_encode(key_marker, false) + "&";
        query += "prefix=" + aws_uri_encode(prefix, false);
        if (!id_marker.empty()) query += "&upload-id-marker=" + aws_uri_encode(id_marker, false);
        query += "&uploads=";
        S3Client::Request request = request_for("GET", ObjectUrl{bucket, ""}, query,
                                                "list the unfinished multipart uploads under '" + prefix + "'");
        const auto response = client.perform(request);
        bool truncated = false;
        std::string next_key, next_id;
        OpenUpload upload;
        for (const auto& [path, text] : parse_xml_leaves(response.body, what)) {
            const std::string field = below_root(path);
            if (field == "Upload/Key") upload.key = text;
            else if (field == "Upload/UploadId") upload.upload_id = text;
            else if (field == "Upload") uploads.push_back(std::exchange(upload, {}));
            else if (field == "IsTruncated") truncated = text == "true";
            else if (field == "NextKeyMarker") next_key = text;
            else if (field == "NextUploadIdMarker") next_id = text;
        }
        if (!truncated) return uploads;
        if (next_key.empty() && next_id.empty()) throw Error(what + ": the listing is truncated but names no next upload");
        key_marker = next_key;
        id_marker = next_id;
    }
}

}  // namespace vmerge
