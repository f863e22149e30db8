#include "output/s3/bucket_output.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"
#include "io/checksum.h"
#include "io/output_names.h"
#include "output/s3/bucket_target.h"
#include "output/safetensors/safetensors_layout.h"

namespace vmerge {
namespace {

// The part size of the AWS tools' transfers: 128 requests per GiB written (a merge asks about
// 800 per GiB to read it), and the few parts a rank holds at once stay small beside its budget.
// On the loopback test server, 8 MiB parts merged 0.5 GB in 12.5 s, 16 MiB in 18.1 s, 32 MiB
// in 22.2 s (docs/performance.md).
constexpr uint64_t kDefaultPartBytes = 8ull << 20;
// Requests open at once per rank, and so the parts in memory on their way (8 MiB each).
constexpr int kUploadThreads = 4;
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool inside(const std::string& key, const std::string& folder) {
    return key == folder || folder.empty() || key.starts_with(folder + "/");
}

}  // namespace

BucketOutput::BucketOutput(OutputOptions options) : OutputFormat(std::move(options)) {
    target_ = parse_object_url(options_.target);
    // A bucket has no staging folder: no journal, no free-space check; what --resume continues is
    // the store's open uploads (prepare), and a failure aborts them instead of keeping them.
    options_.resumable = false;
    options_.check_free_space = false;
    if (!options_.reuse.empty()) throw Error("--reuse: a merge into a bucket (" + options_.target + ") takes no earlier output");
}

BucketOutput::~BucketOutput() {
    uploader_.reset();
    // A failure on any rank, in any step, leaves no open upload behind (rank 0 knows every id).
    if (options_.rank == 0 && !committed_) abort_uploads();
}

ObjectUrl BucketOutput::file_url(const std::string& rel) const { return {target_.bucket, target_.key + "/" + rel}; }

void BucketOutput::plan(TensorMapping& mapping) {
    tensors_ = &mapping.tensors;
    layout_ = plan_safetensors_layout(mapping.tensors, options_.max_shard_size);
    const auto work = plan_rank_work(mapping.tensors, layout_, options_.ranks);
    work_ = work.at(options_.rank);
    plan_ = plan_uploads(mapping.tensors, layout_, work,
                         options_.upload_part_size ? options_.upload_part_size : kDefaultPartBytes);
}

// The names an earlier output's manifest lists (Error when it is not a vmerge manifest).
std::set<std::string> BucketOutput::manifest_files(const std::vector<ObjectListingPage::Object>& objects) const {
    const ObjectUrl url = file_url(kManifestFile);
    uint64_t size = 0;
    for (const auto& o : objects)
        if (o.key == url.key) size = o.size;
    return read_bucket_manifest(target_, size);
}

// The prefix must not hold an input, nor anything but an earlier vmerge output (with --force) or,
// with --resume, weight files of this plan that an interrupted commit completed.
void BucketOutput::check_prefix(const std::vector<InputFolder>& inputs) {
    if (target_.key.empty())
        throw Error("--target_dir " + options_.target + ": name a folder in the bucket (s3://bucket/folder), not the bucket itself");
    for (const auto& input : inputs) {
        if (!is_object_url(input.path)) continue;
        const ObjectUrl in = parse_object_url(input.path);
        if (in.bucket == target_.bucket && (inside(in.key, target_.key) || inside(target_.key, in.key)))
            throw Error("--target_dir " + options_.target + ": overlaps " + input.what + " " + input.path +
                        "; write the merge to a prefix of its own");
    }
    const auto objects = s3_client().list(target_.bucket, target_.key + "/", false).objects;
    if (objects.empty()) return;
    const std::string manifest = file_url(kManifestFile).key;
    const bool ours = std::any_of(objects.begin(), objects.end(), [&](const auto& o) { return o.key == manifest; });
    if (ours) {  // replaced at the commit; until then (and after a failed merge) it stays whole
        // An object a user added is named first: --force would not help (watch meets this too).
        const auto listed = manifest_files(objects);
        for (const auto& o : objects) {
            const std::string rel = o.key.substr(target_.key.size() + 1);
            if (!listed.count(rel))
                throw Error("--target_dir " + options_.target + ": s3://" + target_.bucket + "/" + o.key +
                            " is not in the earlier output's manifest; vmerge replaces only what it wrote, even "
                            "with --force");
            stale_keys_.push_back(o.key);
        }
        if (!options_.force)
            throw Error("--target_dir " + options_.target + ": holds an earlier vmerge output (" +
                        std::to_string(objects.size()) + " objects); add --force to replace it");
        return;
    }
    for (const auto& o : objects) {
        const bool planned = std::any_of(layout_.files.begin(), layout_.files.end(),
                                         [&](const OutputFile& f) { return file_url(f.name).key == o.key; });
        if (!(options_.resume && planned))
            throw Error("--target_dir " + options_.target + ": holds " + std::to_string(objects.size()) +
                        " objects that are not a vmerge output (e.g. s3://" + target_.bucket + "/" + o.key +
                        "); merge into an empty prefix");
    }
}

// One upload per weight file: with --resume the store's open upload of that key (its parts
// listed), else a new one; an earlier merge's leftover upload of the key is aborted.
void BucketOutput::open_uploads() {
    const S3Client& client = s3_client();
    const auto open = list_multipart_uploads(client, target_.bucket, target_.key + "/");
    upload_ids_.assign(layout_.files.size(), "");
    for (size_t f = 0; f < layout_.files.size(); ++f) {
        const ObjectUrl url = file_url(layout_.files[f].name);
        for (const OpenUpload& upload : open) {
            if (upload.key != url.key) continue;
            if (options_.resume && upload_ids_[f].empty()) {
                upload_ids_[f] = upload.upload_id;
                for (const UploadedPart& part : list_parts(client, url, upload.upload_id)) held_[{f, part.number}] = part;
            } else {
                abort_multipart_upload(client, url, upload.upload_id);
            }
        }
        if (upload_ids_[f].empty()) upload_ids_[f] = create_multipart_upload(client, url);
    }
}

StagingState BucketOutput::prepare(const ResumeIdentity&, const std::vector<InputFolder>& inputs) {
    check_prefix(inputs);
    try {
        open_uploads();
    } catch (...) {
        abort_uploads();
        throw;
    }
    // (StagingState::resumed stays false: it reports bytes a staging folder kept, and a bucket's
    // resume keeps parts, counted in the commit's note.)
    StagingState state;
    if (!held_.empty())
        state.note = "resuming " + options_.target + ": the store holds " + std::to_string(held_.size()) +
                     " parts of an interrupted merge; each is checked against the bytes it should hold";
    return state;
}

void BucketOutput::share_prepared(const OutputExchange& with) {
    nlohmann::json mine;
    if (options_.rank == 0) {
        mine["ids"] = upload_ids_;
        for (const auto& [key, part] : held_) mine["held"].push_back({key.first, part.number, part.size, part.etag});
    }
    const auto all = with.allgather(options_.rank == 0 ? mine.dump() : "");
    const auto shared = nlohmann::json::parse(all.at(0));
    upload_ids_ = shared.at("ids").get<std::vector<std::string>>();
    held_.clear();
    if (shared.contains("held"))
        for (const auto& p : shared["held"])
            held_[{p[0].get<size_t>(), p[1].get<int>()}] = {p[1].get<int>(), p[2].get<uint64_t>(), p[3].get<std::string>()};
}

void BucketOutput::open() {
    uploader_ = std::make_unique<PartUploader>(kUploadThreads, kUploadThreads);
    parts_ = std::make_unique<RankParts>(plan_, layout_, options_.rank,
                                         [this](const PlannedPart& part, std::vector<unsigned char> bytes) {
                                             queue_part(part, std::move(bytes));
                                         });
    parts_->start();
}

void BucketOutput::queue_part(const PlannedPart& part, std::vector<unsigned char> bytes) {
    uploader_->submit([this, &part, bytes = std::move(bytes)] { send_part(part, bytes); });
}

// A failed upload surfaces in the copy step, where it happened.
void BucketOutput::finish() { uploader_->wait(); }

// A part the store already holds with these very bytes (--resume) is not sent again.
void BucketOutput::send_part(const PlannedPart& part, const std::vector<unsigned char>& bytes) {
    const ObjectUrl url = file_url(layout_.files[part.file].name);
    auto held = held_.find({part.file, part.number});
    if (held != held_.end() && held->second.size == bytes.size() &&
        held->second.etag == md5_etag(bytes.data(), bytes.size())) {
        std::lock_guard lock(sent_mutex_);
        etags_[{part.file, part.number}] = held->second.etag;
        ++resumed_parts_;
        return;
    }
    const std::string etag = upload_part(s3_client(), url, upload_ids_.at(part.file), part.number, bytes.data(), bytes.size());
    std::lock_guard lock(sent_mutex_);
    etags_[{part.file, part.number}] = etag;
}

void BucketOutput::write(const RowBlock& b) {
    const TensorLocation& where = layout_.locations.at(b.tensor);
    const uint64_t offset = where.offset + static_cast<uint64_t>(b.row_begin) * row_bytes(tensors_->at(b.tensor));
    blocks_.push_back({b.tensor, b.row_begin, b.row_end, where.file, offset, b.size, b.xxh64 ? *b.xxh64 : xxh64(b.data, b.size)});
    parts_->add(where.file, offset, b.data, b.size);
}

void BucketOutput::exchange(int round, const OutputExchange& with) {
    if (round == 0) {  // the pieces to their parts' owners, which send the parts they completed
        const auto incoming = with.alltoall(parts_->outgoing_pieces(options_.ranks));
        parts_->take_pieces(incoming);
        uploader_->wait();
        parts_->check_complete();
        return;
    }
    nlohmann::json mine;  // the ETags for rank 0's CompleteMultipartUpload, the blocks for the checksums
    mine["etags"] = nlohmann::json::array();
    mine["blocks"] = nlohmann::json::array();
    mine["resumed"] = resumed_parts_;
    for (const auto& [key, etag] : etags_) mine["etags"].push_back({key.first, key.second, etag});
    for (const auto& b : blocks_)
        mine["blocks"].push_back({b.tensor, b.row_begin, b.row_end, b.file, b.offset, b.length, b.hash});
    const auto all = with.allgather(mine.dump());
    if (options_.rank == 0) gathered_ = all;
}

void BucketOutput::abort_uploads() noexcept {
    for (size_t f = 0; f < upload_ids_.size(); ++f) {
        if (upload_ids_[f].empty()) continue;
        try {
            abort_multipart_upload(s3_client(), file_url(layout_.files[f].name), upload_ids_[f]);
        } catch (const std::exception&) {
            // Aborted already (by the rank that failed, or completed): nothing left to drop.
        }
    }
}

void BucketOutput::abandon() {
    uploader_.reset();  // no part is sent after the aborts below
    parts_.reset();
    abort_uploads();
}

void BucketOutput::complete_uploads() {
    std::vector<std::vector<UploadedPart>> parts(layout_.files.size());
    for (const auto& text : gathered_) {
        const auto rank = nlohmann::json::parse(text);  // (not a temporary: the loop keeps a reference into it)
        for (const auto& e : rank.at("etags"))
            parts.at(e[0].get<size_t>()).push_back({e[1].get<int>(), 0, e[2].get<std::string>()});
    }
    for (size_t f = 0; f < parts.size(); ++f) {
        auto& list = parts[f];
        std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.number < b.number; });
        for (size_t i = 0; i < plan_.parts[f].size(); ++i)
            if (i >= list.size() || list[i].number != static_cast<int>(i) + 1)
                throw Error(file_url(layout_.files[f].name).text() + ": part " + std::to_string(i + 1) +
                            " was not sent by any rank; the upload is not completed");
        complete_multipart_upload(s3_client(), file_url(layout_.files[f].name), upload_ids_[f], list);
        upload_ids_[f].clear();  // completed: nothing to abort any more
    }
}

// What the commit writes besides the weights, as publish_staging writes them into a folder.
std::map<std::string, std::string> BucketOutput::small_files() const {
    std::map<std::string, std::string> files = options_.generated;
    const HfFilePlan hf = plan_hf_file_copies(options_.hf_dir, options_.hf_training_files);
    for (const auto& copy : hf.copies)
        if (!files.count(copy.rel)) files[copy.rel] = read_hf_file(copy);
    std::vector<WrittenBlock> blocks;
    for (const auto& text : gathered_) {
        const auto rank = nlohmann::json::parse(text);
        for (const auto& b : rank.at("blocks"))
            blocks.push_back({b[0].get<size_t>(), b[1].get<int64_t>(), b[2].get<int64_t>(), b[3].get<size_t>(),
                              b[4].get<uint64_t>(), b[5].get<uint64_t>(), b[6].get<uint64_t>()});
    }
    files[kChecksumsFile] = checksums_json(layout_, blocks);
    if (layout_.model_files > 1) files[kIndexFile] = index_json(*tensors_, layout_);
    return files;
}

std::vector<std::string> BucketOutput::commit() {
    std::vector<std::string> written;
    try {
        if (!stale_keys_.empty()) {
            // The earlier output's manifest and index go first: from here on the prefix no longer
            // claims a model until the new manifest is written.
            delete_object(s3_client(), file_url(kManifestFile));
            delete_object(s3_client(), file_url(kIndexFile));
        }
        complete_uploads();
        for (const auto& file : layout_.files) written.push_back(file_url(file.name).key);
        auto files = small_files();
        for (const auto& [rel, _] : files) check_output_name(rel, options_.target);
        // config.json, the index and the manifest last, in that order: a reader that finds the
        // index or the manifest finds every file it names.
        std::vector<std::string> order;
        for (const auto& [rel, _] : files)
            if (rel != "config.json" && rel != kIndexFile) order.push_back(rel);
        for (const char* last : {"config.json", kIndexFile})
            if (files.count(last)) order.push_back(last);
        for (const auto& rel : order) {
            put_object(s3_client(), file_url(rel), files[rel]);
            written.push_back(file_url(rel).key);
        }
        std::vector<std::string> listed;
        for (const auto& f : layout_.files) listed.push_back(f.name);
        for (const auto& [rel, _] : files) listed.push_back(rel);
        for (const auto& key : stale_keys_)  // an earlier output's objects this one does not replace
            if (std::find(written.begin(), written.end(), key) == written.end() && key != file_url(kManifestFile).key)
                delete_object(s3_client(), {target_.bucket, key});
        put_object(s3_client(), file_url(kManifestFile), manifest_json(listed));
    } catch (...) {
        abort_uploads();
        for (const auto& key : written) {  // nothing half-written stays visible
            try {
                delete_object(s3_client(), {target_.bucket, key});
            } catch (const std::exception&) {
            }
        }
        throw;
    }
    committed_ = true;
    std::vector<std::string> notes;
    for (const auto& s : plan_hf_file_copies(options_.hf_dir, options_.hf_training_files).skipped)
        notes.push_back("not copied from " + options_.hf_dir + ": " + s);
    uint64_t resumed = 0;
    for (const auto& text : gathered_) resumed += nlohmann::json::parse(text).value("resumed", uint64_t{0});
    if (resumed) notes.push_back(std::to_string(resumed) + " parts were already in the store with the same bytes and not sent again");
    return notes;
}

}  // namespace vmerge
