#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vmerge {

// The one view of an input tree that every backend's detection uses: a local folder, or a key
// prefix in an S3-compatible store ("s3://bucket/prefix"), where a folder is the prefix before a
// '/' and a listing is ListObjectsV2 with '/' as delimiter. Backends list, test and join paths
// through these functions only, so every backend reads a bucket as it reads a disk.
//
// A store's listings are kept for the life of the process (a checkpoint does not change while it
// is merged): each folder is listed once, and sizes come from the listing, not one HEAD per file.
// `forget_input_listings` drops them (watch, which polls a changing run folder).

enum class EntryKind { missing, file, folder, other };

struct FolderEntry {
    std::string name;  // the last component
    bool is_folder = false;
    uint64_t size = 0;  // files; 0 for a local file's entry (InputFile knows its size)
    int64_t modified_seconds = 0;  // a store object's LastModified; 0 for local entries and folders
};

// What `path` is (links followed for local paths); `other` for a FIFO, device or socket.
EntryKind entry_kind(const std::string& path);
inline bool path_exists(const std::string& path) { return entry_kind(path) != EntryKind::missing; }
inline bool is_folder(const std::string& path) { return entry_kind(path) == EntryKind::folder; }

// The entries of a folder, sorted by name; empty when `dir` is not a folder. A store that
// cannot be listed (missing bucket, denied) is an Error naming the URL and HTTP status.
std::vector<FolderEntry> list_input_folder(const std::string& dir);

// Every object under the store folder `url` at any depth, as paths relative to it ("a/b.json"),
// sorted (one non-delimited listing).
std::vector<FolderEntry> list_objects_under(const std::string& url);

// `dir` + "/" + `name` for either kind of path ('/' between them never doubled).
std::string join_path(const std::string& dir, const std::string& name);
// The folder holding `path` ("" for a bare name), and its last component.
std::string parent_of(const std::string& path);
std::string name_of(const std::string& path);

// `path` with "." and ".." parts and doubled '/' resolved (lexically, no links followed); an
// s3:// URL keeps its scheme (std::filesystem would fold "s3://" into "s3:/").
std::string normal_input_path(const std::string& path);

// A store object's size from the listing of its folder, when the folder was listed.
std::optional<uint64_t> listed_object_size(const std::string& url);

// When `path` (a file) was last written, in seconds since the epoch: a local file's mtime, a
// store object's LastModified from its folder's listing; nullopt when it is not there.
std::optional<int64_t> input_modified_seconds(const std::string& path);

void forget_input_listings();

}  // namespace vmerge
