#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/s3_client.h"

namespace vmerge {

// The writes of an S3-compatible store that a merge into a bucket needs: single PUTs for small
// files, multipart uploads for the weight files, and the listings --resume and the failure
// handling need. Each call is one request (or one request per page) through S3Client, with its
// retries; a final failure is an Error naming the s3:// URL, the operation and the HTTP status.

// One part an upload holds (ListParts).
struct UploadedPart {
    int number = 0;
    uint64_t size = 0;
    std::string etag;  // as the store gives it, quotes included
};

// One unfinished multipart upload (ListMultipartUploads).
struct OpenUpload {
    std::string key;
    std::string upload_id;
};

// PUT of a whole object.
void put_object(const S3Client& client, const ObjectUrl& object, const std::string& bytes);
// PUT of a small object only where no object has its key (If-None-Match: *, S3's conditional
// write); false when one has (HTTP 412), with nothing written.
bool put_object_if_absent(const S3Client& client, const ObjectUrl& object, const std::string& bytes);
// DELETE of an object (a missing one is not an error: S3 answers 204 either way).
void delete_object(const S3Client& client, const ObjectUrl& object);

// CreateMultipartUpload: the new upload's id.
std::string create_multipart_upload(const S3Client& client, const ObjectUrl& object);
// UploadPart with a Content-MD5, so the store refuses bytes damaged on the way: the part's ETag.
std::string upload_part(const S3Client& client, const ObjectUrl& object, const std::string& upload_id, int number,
                        const unsigned char* data, uint64_t size);
// CompleteMultipartUpload of `parts` (ascending numbers); the object appears only now.
void complete_multipart_upload(const S3Client& client, const ObjectUrl& object, const std::string& upload_id,
                               const std::vector<UploadedPart>& parts);
// AbortMultipartUpload: the store drops the upload's parts.
void abort_multipart_upload(const S3Client& client, const ObjectUrl& object, const std::string& upload_id);
// ListParts, every page.
std::vector<UploadedPart> list_parts(const S3Client& client, const ObjectUrl& object, const std::string& upload_id);
// ListMultipartUploads of the keys under `prefix`, every page.
std::vector<OpenUpload> list_multipart_uploads(const S3Client& client, const std::string& bucket,
                                               const std::string& prefix);

// The ETag S3 gives a part (and a single-PUT object without SSE-KMS): the quoted lower-case hex
// MD5 of its bytes. --resume compares it with the bytes it would send.
std::string md5_etag(const unsigned char* data, uint64_t size);

}  // namespace vmerge
