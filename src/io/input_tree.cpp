#include "io/input_tree.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/error.h"
#include "io/object_url.h"
#include "io/s3_client.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

struct ListingCache {
    std::mutex mutex;
    std::map<std::string, std::vector<FolderEntry>> folders;  // by "s3://bucket/prefix" without trailing '/'
};

ListingCache& cache() {
    static ListingCache c;
    return c;
}

std::string canonical_url(const std::string& url) { return parse_object_url(url).text(); }

std::vector<FolderEntry> list_store_folder(const std::string& url) {
    const std::string key = canonical_url(url);
    {
        std::lock_guard lock(cache().mutex);
        if (auto it = cache().folders.find(key); it != cache().folders.end()) return it->second;
    }
    const ObjectUrl folder = parse_object_url(url);
    const std::string prefix = folder.key.empty() ? "" : folder.key + "/";
    const ObjectListingPage page = s3_client().list(folder.bucket, prefix, true);
    std::vector<FolderEntry> entries;
    for (const auto& object : page.objects) {
        const std::string name = object.key.substr(prefix.size());
        if (!name.empty()) entries.push_back({name, false, object.size, object.modified_seconds});  // "" is a folder marker
    }
    for (const auto& common : page.common_prefixes) {
        std::string name = common.substr(prefix.size());
        while (name.ends_with('/')) name.pop_back();
        if (!name.empty()) entries.push_back({name, true, 0});
    }
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    std::lock_guard lock(cache().mutex);
    cache().folders[key] = entries;
    return entries;
}

EntryKind store_entry_kind(const std::string& url) {
    const ObjectUrl object = parse_object_url(url);
    if (object.key.empty()) {
        list_store_folder(url);  // Error for a missing bucket
        return EntryKind::folder;
    }
    const size_t slash = object.key.rfind('/');
    const std::string parent = "s3://" + object.bucket + (slash == std::string::npos ? "" : "/" + object.key.substr(0, slash));
    const std::string name = slash == std::string::npos ? object.key : object.key.substr(slash + 1);
    for (const auto& entry : list_store_folder(parent))
        if (entry.name == name) return entry.is_folder ? EntryKind::folder : EntryKind::file;
    return EntryKind::missing;
}

}  // namespace

EntryKind entry_kind(const std::string& path) {
    if (is_object_url(path)) return store_entry_kind(path);
    std::error_code ec;
    const fs::file_type type = fs::status(path, ec).type();
    if (type == fs::file_type::not_found || type == fs::file_type::none) return EntryKind::missing;
    if (type == fs::file_type::directory) return EntryKind::folder;
    if (type == fs::file_type::regular) return EntryKind::file;
    return EntryKind::other;
}

std::vector<FolderEntry> list_input_folder(const std::string& dir) {
    if (is_object_url(dir)) return list_store_folder(dir);
    std::vector<FolderEntry> entries;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::error_code type_ec;
        entries.push_back({entry.path().filename().string(), entry.is_directory(type_ec), 0});
    }
    std::error_code kind_ec;
    if (ec && fs::is_directory(dir, kind_ec))  // a folder that exists but cannot be read (permissions)
        throw Error(dir + ": cannot list the folder: " + ec.message());
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return entries;
}

std::vector<FolderEntry> list_objects_under(const std::string& url) {
    const ObjectUrl folder = parse_object_url(url);
    const std::string prefix = folder.key.empty() ? "" : folder.key + "/";
    std::vector<FolderEntry> entries;
    for (const auto& object : s3_client().list(folder.bucket, prefix, false).objects)
        if (object.key.size() > prefix.size() && !object.key.ends_with('/'))
            entries.push_back({object.key.substr(prefix.size()), false, object.size});
    std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return entries;
}

std::string join_path(const std::string& dir, const std::string& name) {
    if (dir.empty()) return name;
    if (!is_object_url(dir)) return (fs::path(dir) / name).string();
    return dir.ends_with('/') ? dir + name : dir + "/" + name;
}

std::string parent_of(const std::string& path) {
    if (!is_object_url(path)) return fs::path(path).parent_path().string();
    const ObjectUrl object = parse_object_url(path);
    const size_t slash = object.key.rfind('/');
    return "s3://" + object.bucket + (slash == std::string::npos ? "" : "/" + object.key.substr(0, slash));
}

std::string name_of(const std::string& path) {
    if (!is_object_url(path)) return fs::path(path).filename().string();
    const ObjectUrl object = parse_object_url(path);
    return object.key.substr(object.key.rfind('/') + 1);
}

std::string normal_input_path(const std::string& path) {
    return is_object_url(path) ? parse_object_url(path).text() : fs::path(path).lexically_normal().string();
}

std::optional<uint64_t> listed_object_size(const std::string& url) {
    const std::string parent = parent_of(url), name = name_of(url);
    std::lock_guard lock(cache().mutex);
    const auto it = cache().folders.find(canonical_url(parent));
    if (it == cache().folders.end()) return std::nullopt;
    for (const auto& entry : it->second)
        if (entry.name == name && !entry.is_folder) return entry.size;
    return std::nullopt;
}

std::optional<int64_t> input_modified_seconds(const std::string& path) {
    if (is_object_url(path)) {
        const std::string name = name_of(path);
        for (const auto& entry : list_store_folder(parent_of(path)))
            if (entry.name == name && !entry.is_folder) return entry.modified_seconds;
        return std::nullopt;
    }
    std::error_code ec;
    const auto t = fs::last_write_time(path, ec);
    if (ec) return std::nullopt;
    const auto since = std::chrono::file_clock::to_sys(t).time_since_epoch();
    return std::chrono::duration_cast<std::chrono::seconds>(since).count();
}

void forget_input_listings() {
    std::lock_guard lock(cache().mutex);
    cache().folders.clear();
}

}  // namespace vmerge
