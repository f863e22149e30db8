#pragma once
#include <map>
#include <mutex>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "io/object_url.h"
#include "io/s3_multipart.h"
#include "output/output_format.h"
#include "output/s3/part_uploader.h"
#include "output/s3/rank_parts.h"
#include "output/s3/upload_plan.h"

namespace vmerge {

// --target_dir s3://bucket/prefix: the safetensors folder written straight into a bucket
// (docs/object-storage.md). Each weight file is one multipart upload that rank 0 creates and
// shares; each rank sends the parts its share covers (upload_plan.h); rank 0 completes the
// uploads, then writes the HF files, the checksums, config.json, the index and the manifest, in
// that order, so a reader that finds the index or the manifest finds a complete model.
// A failure aborts every upload (nothing appears under the prefix); a killed merge leaves its
// uploads open, and --resume sends only the parts the store does not already hold with the
// same bytes (size and MD5 ETag of what would be sent).
class BucketOutput final : public OutputFormat {
public:
    explicit BucketOutput(OutputOptions options);
    ~BucketOutput() override;

    void plan(TensorMapping& mapping) override;
    const OutputLayout& layout() const override { return layout_; }
    StagingState prepare(const ResumeIdentity& identity, const std::vector<InputFolder>& inputs) override;
    void share_prepared(const OutputExchange& with) override;
    void open() override;
    std::vector<WriteTask> tasks() const override { return work_; }
    void write(const RowBlock& block) override;
    bool takes_block_hashes() const override { return true; }
    void finish() override;
    int exchange_rounds() const override { return 2; }
    void exchange(int round, const OutputExchange& with) override;
    void abandon() override;
    std::vector<std::string> commit() override;

private:
    ObjectUrl file_url(const std::string& rel) const;
    void send_part(const PlannedPart& part, const std::vector<unsigned char>& bytes);
    void queue_part(const PlannedPart& part, std::vector<unsigned char> bytes);
    void check_prefix(const std::vector<InputFolder>& inputs);
    std::set<std::string> manifest_files(const std::vector<ObjectListingPage::Object>& objects) const;
    void open_uploads();
    void abort_uploads() noexcept;
    void complete_uploads();
    std::map<std::string, std::string> small_files() const;

    ObjectUrl target_;
    const std::vector<OutputTensor>* tensors_ = nullptr;
    OutputLayout layout_;
    std::vector<WriteTask> work_;
    UploadPlan plan_;
    std::unique_ptr<RankParts> parts_;
    std::unique_ptr<PartUploader> uploader_;
    std::mutex sent_mutex_;  // etags_ and resumed_parts_, written by the uploader's threads
    std::vector<std::string> upload_ids_;                        // by file
    std::map<std::pair<size_t, int>, UploadedPart> held_;        // --resume: parts the store holds
    std::map<std::pair<size_t, int>, std::string> etags_;        // parts this rank sent or found
    std::vector<WrittenBlock> blocks_;                           // this rank's, for the checksums
    std::vector<std::string> gathered_;                          // rank 0: every rank's ETags and blocks
    std::vector<std::string> stale_keys_;                        // --force: an earlier output's objects
    uint64_t resumed_parts_ = 0;
    bool committed_ = false;
};

}  // namespace vmerge
