#include "output/s3/bucket_target.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/output_names.h"
#include "io/s3_client.h"
#include "io/s3_multipart.h"

namespace vmerge {
namespace {

constexpr uint64_t kMaxManifestBytes = 16u << 20;

ObjectUrl object_in(const ObjectUrl& folder, const std::string& rel) { return {folder.bucket, folder.key + "/" + rel}; }

std::vector<ObjectListingPage::Object> objects_under(const ObjectUrl& folder) {
    return s3_client().list(folder.bucket, folder.key + "/", false).objects;
}

}  // namespace

std::set<std::string> read_bucket_manifest(const ObjectUrl& folder, uint64_t size) {
    const ObjectUrl url = object_in(folder, kManifestFile);
    if (size > kMaxManifestBytes)
        throw Error(url.text() + ": " + std::to_string(size) + " bytes, too large for a vmerge manifest");
    std::string text(size, '\0');
    s3_client().read_range(url, 0, text.data(), size);
    std::set<std::string> files;
    try {
        const auto j = nlohmann::json::parse(text);
        if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) throw Error("no \"files\" list");
        // A name is removed later as folder/name: one that is not a plain relative path could
        // reach another prefix's objects.
        for (const auto& f : j["files"]) {
            const std::string rel = f.get<std::string>();
            check_output_name(rel, "its files list");
            files.insert(rel);
        }
    } catch (const std::exception& e) {
        throw Error(url.text() + ": not a vmerge manifest (" + e.what() + ")");
    }
    return files;
}

ExistingTarget classify_bucket_target(const ObjectUrl& folder) {
    const auto objects = objects_under(folder);
    if (objects.empty()) return {TargetKind::Absent, ""};
    const std::string manifest = object_in(folder, kManifestFile).key;
    const ObjectListingPage::Object* found = nullptr;
    for (const auto& o : objects)
        if (o.key == manifest) found = &o;
    if (!found)
        return {TargetKind::Other, std::to_string(objects.size()) + " objects and no " + std::string(kManifestFile)};
    const auto listed = read_bucket_manifest(folder, found->size);
    for (const auto& o : objects) {
        const std::string rel = o.key.substr(folder.key.size() + 1);
        if (o.key != manifest && !listed.count(rel))
            return {TargetKind::Other, "s3://" + folder.bucket + "/" + o.key + " is not in its manifest"};
    }
    return {TargetKind::VmergeOutput, ""};
}

bool bucket_merge_interrupted(const ObjectUrl& folder) {
    if (!list_multipart_uploads(s3_client(), folder.bucket, folder.key + "/").empty()) return true;
    const auto objects = objects_under(folder);
    const std::string manifest = object_in(folder, kManifestFile).key;
    for (const auto& o : objects)
        if (o.key == manifest) return false;
    return !objects.empty();
}

void remove_bucket_output(const ObjectUrl& folder) {
    const ExistingTarget target = classify_bucket_target(folder);
    if (target.kind != TargetKind::VmergeOutput)
        throw Error(folder.text() + ": not removed, it is not an output vmerge wrote (" +
                    (target.reason.empty() ? std::string("nothing there") : target.reason) + ")");
    uint64_t manifest_size = 0;
    const std::string manifest = object_in(folder, kManifestFile).key;
    for (const auto& o : objects_under(folder))
        if (o.key == manifest) manifest_size = o.size;
    const auto listed = read_bucket_manifest(folder, manifest_size);
    delete_object(s3_client(), object_in(folder, kManifestFile));
    for (const auto& rel : listed)
        if (rel != kManifestFile) delete_object(s3_client(), object_in(folder, rel));
}

}  // namespace vmerge
