#pragma once
#include <set>
#include <string>
#include <vector>

#include "io/object_url.h"
#include "io/s3_xml.h"
#include "output/target_guard.h"

namespace vmerge {

// An output prefix in a bucket judged as target_guard.h judges a folder, for the commands that
// look at many outputs (watch --target_root s3://...): what is there, whether a merge into it was
// interrupted, and removing one vmerge wrote. BucketOutput (bucket_output.h) writes the manifest
// last, so a prefix whose manifest lists every object under it holds a complete output.

// The file names the manifest `folder`/vmerge.manifest.json lists; `size` is its size from the
// listing. Error naming the object when it is too large or not a vmerge manifest.
std::set<std::string> read_bucket_manifest(const ObjectUrl& folder, uint64_t size);

// Absent: no object under the prefix; VmergeOutput: its manifest lists every object under it;
// Other: anything else, with the reason (objects without a manifest, or ones it does not list).
ExistingTarget classify_bucket_target(const ObjectUrl& folder);

// Whether a merge into `folder` stopped before its commit: multipart uploads still open under it,
// or objects but no manifest (the commit was cut short). `merge --resume` continues either.
bool bucket_merge_interrupted(const ObjectUrl& folder);

// Deletes an output classify_bucket_target calls VmergeOutput: the manifest first (from then on
// the prefix claims no model), then every object it lists. Error naming the prefix otherwise.
void remove_bucket_output(const ObjectUrl& folder);

}  // namespace vmerge
