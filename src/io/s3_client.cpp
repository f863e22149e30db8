#include "io/s3_client.h"

#include <curl/curl.h>
#include <openssl/sha.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"

namespace vmerge {
namespace {

constexpr int kMaxAttempts = 6;
constexpr const char* kEmptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// One libcurl handle per thread, reused so that its connection to the store stays open.
CURL* thread_handle() {
    static std::once_flag global_init;
    std::call_once(global_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    thread_local std::unique_ptr<CURL, void (*)(CURL*)> handle(curl_easy_init(), curl_easy_cleanup);
    if (!handle) throw Error("cannot initialise libcurl");
    curl_easy_reset(handle.get());
    return handle.get();
}

struct Transfer {
    CURL* handle;
    const S3Client::Request* request;
    S3Client::Response* response;
    uint64_t sent = 0;
    bool overflow = false;
};

bool is_success(long status) { return status >= 200 && status < 300; }

size_t on_body(char* data, size_t, size_t size, void* user) {
    auto* t = static_cast<Transfer*>(user);
    long status = 0;
    curl_easy_getinfo(t->handle, CURLINFO_RESPONSE_CODE, &status);
    if (t->request->sink && is_success(status)) {
        if (t->response->delivered + size > t->request->sink_size) {
            t->overflow = true;
            return 0;  // aborts the transfer: the store sent more than the range asked for
        }
        std::memcpy(t->request->sink + t->response->delivered, data, size);
        t->response->delivered += size;
    } else {
        if (t->response->body.size() + size > (uint64_t{64} << 20)) return 0;  // a listing page or an error: bounded
        t->response->body.append(data, size);
    }
    return size;
}

size_t on_upload(char* buffer, size_t, size_t size, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const uint64_t n = std::min<uint64_t>(size, t->request->body_size - t->sent);
    std::memcpy(buffer, t->request->body + t->sent, n);
    t->sent += n;
    return n;
}

std::string header_value(const std::string& line, const char* name) {
    const size_t length = std::strlen(name);
    if (line.size() <= length || strncasecmp(line.c_str(), name, length) != 0 || line[length] != ':') return "";
    std::string value = line.substr(length + 1);
    const size_t a = value.find_first_not_of(" \t");
    const size_t b = value.find_last_not_of(" \t\r\n");
    return a == std::string::npos ? "" : value.substr(a, b - a + 1);
}

size_t on_header(char* data, size_t, size_t size, void* user) {
    auto* response = static_cast<Transfer*>(user)->response;
    const std::string line(data, size);
    if (auto v = header_value(line, "ETag"); !v.empty()) response->etag = v;
    if (auto v = header_value(line, "Content-Range"); !v.empty()) response->content_range = v;
    if (auto v = header_value(line, "Content-Length"); !v.empty()) response->content_length = std::stoull(v);
    return size;
}

bool retryable(long status) { return status == 429 || status == 500 || status == 502 || status == 503 || status == 504; }

bool retryable(CURLcode code) {
    return code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT || code == CURLE_SEND_ERROR ||
           code == CURLE_RECV_ERROR || code == CURLE_GOT_NOTHING || code == CURLE_PARTIAL_FILE;
}

// The message of a final failure: the operation, the URL, the status and the store's own words.
std::string failure(const S3Client::Request& request, const S3Client::Response& response, const S3Settings& settings) {
    std::string text = request.object.text() + ": cannot " + request.what + ": HTTP " + std::to_string(response.status);
    const std::string store_says = s3_error_text(response.body);
    if (!store_says.empty()) text += " " + store_says;
    if (response.status == 404 && request.method == "HEAD") text += " (no such object)";
    if (response.status == 403)
        text += " (access denied: check the credentials from " + settings.credentials_source + " and the bucket's policy)";
    return text;
}

}  // namespace

S3Client::S3Client(S3Settings settings) : settings_(std::move(settings)) {}

std::string sha256_hex(const void* data, size_t size) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(static_cast<const unsigned char*>(data), size, digest);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out;
    for (const unsigned char byte : digest) {
        out += kHex[byte >> 4];
        out += kHex[byte & 15];
    }
    return out;
}

S3Client::Response S3Client::perform_once(const Request& request) const {
    CURL* handle = thread_handle();
    if (const std::string why = object_key_problem(request.object.key); !why.empty())
        throw Error(request.object.text() + ": " + why);
    Response response;
    Transfer transfer{handle, &request, &response};
    const std::string url = settings_.base_url(request.object.bucket) + settings_.path_prefix(request.object.bucket) + "/" +
                            aws_uri_encode(request.object.key, true) + (request.query.empty() ? "" : "?" + request.query);
    const std::string sigv4 = "aws:amz:" + settings_.region + ":s3";
    curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(handle, CURLOPT_USERNAME, settings_.access_key_id.c_str());
    curl_easy_setopt(handle, CURLOPT_PASSWORD, settings_.secret_access_key.c_str());
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT, 20L);
    // A stalled transfer (under 1 byte/s for a minute) fails and is retried, rather than hanging.
    curl_easy_setopt(handle, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(handle, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(handle, CURLOPT_HEADERDATA, &transfer);

    std::string payload_hash = kEmptyPayloadHash;
    if (request.body) payload_hash = sha256_hex(request.body, request.body_size);
    if (request.method == "HEAD") {
        curl_easy_setopt(handle, CURLOPT_NOBODY, 1L);
    } else if (request.method == "PUT") {
        curl_easy_setopt(handle, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(handle, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(handle, CURLOPT_READDATA, &transfer);
        curl_easy_setopt(handle, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(request.body_size));
    } else if (request.method == "POST") {
        curl_easy_setopt(handle, CURLOPT_POST, 1L);
        curl_easy_setopt(handle, CURLOPT_POSTFIELDS, request.body ? request.body : "");
        curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body_size));
    } else if (request.method != "GET") {
        curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(nullptr, curl_slist_free_all);
    auto add = [&](const std::string& line) { headers.reset(curl_slist_append(headers.release(), line.c_str())); };
    add("x-amz-content-sha256: " + payload_hash);
    // libcurl asks for "100 Continue" before a body over 1 MiB and waits up to a second for it;
    // a store that does not answer it (many on-premises ones, test servers) costs that second on
    // every part uploaded. The body is sent at once instead.
    if (request.body) add("Expect:");
    if (!settings_.session_token.empty()) add("x-amz-security-token: " + settings_.session_token);
    for (const auto& line : request.headers) add(line);
    curl_easy_setopt(handle, CURLOPT_HTTPHEADER, headers.get());

    char curl_error[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, curl_error);
    traffic_.requests += 1;
    traffic_.bytes_sent += request.body_size;
    const CURLcode code = curl_easy_perform(handle);
    traffic_.bytes_received += response.delivered + response.body.size();
    if (transfer.overflow)
        throw Error(request.object.text() + ": cannot " + request.what + ": the store sent more bytes than the range holds");
    if (code != CURLE_OK) {
        response.status = retryable(code) ? -1 : -2;
        response.body = std::string(curl_error[0] ? curl_error : curl_easy_strerror(code));
        return response;
    }
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &response.status);
    return response;
}

S3Client::Response S3Client::perform(const Request& request) const {
    std::mt19937 jitter(std::random_device{}());
    for (int attempt = 1;; ++attempt) {
        Response response = perform_once(request);
        if (is_success(response.status) || (request.answer_allowed && response.status == request.answer_allowed))
            return response;
        const bool again = response.status == -1 || retryable(response.status);
        if (!again || attempt == kMaxAttempts) {
            if (response.status < 0)
                throw Error(request.object.text() + ": cannot " + request.what + ": " + response.body + " (endpoint " +
                            settings_.base_url(request.object.bucket) + ", after " + std::to_string(attempt) + " attempts)");
            std::string text = failure(request, response, settings_);
            if (attempt > 1) text += " (after " + std::to_string(attempt) + " attempts)";
            throw Error(text);
        }
        traffic_.retries += 1;
        // Exponential backoff with full jitter: 0.1 s, 0.2 s, ... capped at 5 s.
        const int cap_ms = std::min(5000, 100 << (attempt - 1));
        std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(cap_ms / 2, cap_ms)(jitter)));
    }
}

uint64_t S3Client::object_size(const ObjectUrl& object) const {
    Request request;
    request.method = "HEAD";
    request.object = object;
    request.what = "read the size (HEAD)";
    return perform(request).content_length;
}

void S3Client::read_range(const ObjectUrl& object, uint64_t offset, void* out, uint64_t length) const {
    if (length == 0) return;
    Request request;
    request.object = object;
    request.headers.push_back("range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + length - 1));
    request.sink = static_cast<char*>(out);
    request.sink_size = length;
    request.what = "read " + std::to_string(length) + " bytes at offset " + std::to_string(offset) + " (ranged GET)";
    const Response response = perform(request);
    const std::string expected = "bytes " + std::to_string(offset) + "-" + std::to_string(offset + length - 1) + "/";
    if (response.status != 206 && !(response.status == 200 && offset == 0 && response.delivered == length))
        throw Error(object.text() + ": cannot " + request.what + ": HTTP " + std::to_string(response.status) +
                    " instead of 206 Partial Content");
    if (response.status == 206 && !response.content_range.starts_with(expected))
        throw Error(object.text() + ": cannot " + request.what + ": the store answered with range '" +
                    response.content_range + "'");
    if (response.delivered != length)
        throw Error(object.text() + ": cannot " + request.what + ": got " + std::to_string(response.delivered) +
                    " bytes (is the object truncated?)");
}

ObjectListingPage S3Client::list(const std::string& bucket, const std::string& prefix, bool delimited) const {
    ObjectListingPage all;
    std::string token;
    do {
        Request request;
        request.object.bucket = bucket;
        // Sorted by name, as SigV4's canonical query needs (libcurl 7.88 signs the query as given).
        request.query = token.empty() ? "" : "continuation-token=" + aws_uri_encode(token, false) + "&";
        if (delimited) request.query += "delimiter=%2F&";
        request.query += "list-type=2&prefix=" + aws_uri_encode(prefix, false);
        request.what = "list the objects under '" + prefix + "' (ListObjectsV2)";
        const Response response = perform(request);
        ObjectListingPage page = parse_listing_page(response.body, "s3://" + bucket + ": the listing of '" + prefix + "'");
        for (auto& o : page.objects) all.objects.push_back(std::move(o));
        for (auto& p : page.common_prefixes) all.common_prefixes.push_back(std::move(p));
        token = page.next_continuation_token;
    } while (!token.empty());
    return all;
}

const S3Client& s3_client() {
    static std::once_flag once;
    static std::unique_ptr<S3Client> client;
    std::call_once(once, [] { client = std::make_unique<S3Client>(s3_settings()); });
    return *client;
}

}  // namespace vmerge
