#include "io/s3_settings.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "core/error.h"

namespace vmerge {
namespace {

// One profile of an AWS INI file: its plain keys, and nested settings as "parent.key"
// ("s3 =" followed by indented "addressing_style = path" gives "s3.addressing_style").
using Profile = std::map<std::string, std::string>;

std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r");
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// The section of `path` named `section` ("default", "profile dev", ...); empty when the file
// or the section is missing.
Profile read_profile(const std::string& path, const std::string& section) {
    Profile out;
    std::ifstream in(path);
    if (!in) return out;
    std::string line, current, parent;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        const std::string text = trim(line);
        if (text.empty() || text[0] == '#' || text[0] == ';') continue;
        if (text[0] == '[') {
            if (text.back() != ']') throw Error(path + ":" + std::to_string(number) + ": a section header without ']'");
            current = trim(text.substr(1, text.size() - 2));
            parent.clear();
            continue;
        }
        const size_t eq = text.find('=');
        if (eq == std::string::npos)
            throw Error(path + ":" + std::to_string(number) + ": expected 'name = value' (or a [section])");
        if (current != section) continue;
        const std::string name = trim(text.substr(0, eq)), value = trim(text.substr(eq + 1));
        const bool indented = line[0] == ' ' || line[0] == '\t';
        if (indented && !parent.empty()) {
            out[parent + "." + name] = value;
        } else {
            parent = value.empty() ? name : "";
            if (!value.empty()) out[name] = value;
        }
    }
    return out;
}

std::string env_or(const std::function<const char*(const char*)>& getenv, const char* name, const std::string& fallback) {
    const char* value = getenv(name);
    return value && *value ? std::string(value) : fallback;
}

std::string without_trailing_slash(std::string url) {
    while (url.ends_with('/')) url.pop_back();
    return url;
}

}  // namespace

std::string S3Settings::base_url(const std::string& bucket) const {
    if (!endpoint.empty()) {
        if (path_style) return endpoint;
        const size_t scheme_end = endpoint.find("://");
        return endpoint.substr(0, scheme_end + 3) + bucket + "." + endpoint.substr(scheme_end + 3);
    }
    if (path_style) return "https://s3." + region + ".amazonaws.com";
    return "https://" + bucket + ".s3." + region + ".amazonaws.com";
}

std::string S3Settings::path_prefix(const std::string& bucket) const { return path_style ? "/" + bucket : ""; }

S3Settings load_s3_settings(const std::function<const char*(const char*)>& getenv) {
    S3Settings s;
    const std::string home = env_or(getenv, "HOME", "");
    const std::string profile_name = env_or(getenv, "AWS_PROFILE", "default");
    const std::string config_file = env_or(getenv, "AWS_CONFIG_FILE", home + "/.aws/config");
    const std::string credentials_file = env_or(getenv, "AWS_SHARED_CREDENTIALS_FILE", home + "/.aws/credentials");
    const Profile config = read_profile(config_file, profile_name == "default" ? "default" : "profile " + profile_name);
    const Profile credentials = read_profile(credentials_file, profile_name);
    auto from_profiles = [&](const std::string& key) {
        if (auto it = credentials.find(key); it != credentials.end()) return it->second;
        if (auto it = config.find(key); it != config.end()) return it->second;
        return std::string();
    };

    if (const char* id = getenv("AWS_ACCESS_KEY_ID"); id && *id) {
        s.access_key_id = id;
        s.secret_access_key = env_or(getenv, "AWS_SECRET_ACCESS_KEY", "");
        s.session_token = env_or(getenv, "AWS_SESSION_TOKEN", "");
        s.credentials_source = "the environment (AWS_ACCESS_KEY_ID)";
    } else {
        s.access_key_id = from_profiles("aws_access_key_id");
        s.secret_access_key = from_profiles("aws_secret_access_key");
        s.session_token = from_profiles("aws_session_token");
        s.credentials_source = "profile " + profile_name + " of " + credentials_file + " / " + config_file;
    }
    s.region = env_or(getenv, "AWS_REGION", env_or(getenv, "AWS_DEFAULT_REGION", from_profiles("region")));
    if (s.region.empty()) s.region = "us-east-1";

    const bool ignore_endpoints = env_or(getenv, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", from_profiles("ignore_configured_endpoint_urls")) == "true";
    if (!ignore_endpoints)
        s.endpoint = without_trailing_slash(env_or(getenv, "AWS_ENDPOINT_URL_S3", env_or(getenv, "AWS_ENDPOINT_URL", from_profiles("endpoint_url"))));
    if (!s.endpoint.empty() && s.endpoint.find("://") == std::string::npos)
        throw Error("the S3 endpoint '" + s.endpoint + "' has no scheme (expected http://HOST:PORT or https://HOST)");
    const std::string style = from_profiles("s3.addressing_style");
    s.path_style = style == "path" || (style != "virtual" && !s.endpoint.empty());
    if (s.access_key_id.empty() || s.secret_access_key.empty())
        throw Error("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or aws_access_key_id and "
                    "aws_secret_access_key in " + s.credentials_source +
                    " (vmerge reads only the environment and the shared files, not instance or container credentials)");
    return s;
}

const S3Settings& s3_settings() {
    static std::once_flag once;
    static S3Settings settings;
    std::call_once(once, [] { settings = load_s3_settings([](const char* name) { return std::getenv(name); }); });
    return settings;
}

}  // namespace vmerge
