#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "vmerge/output_layout.h"

namespace vmerge {

// One block of output rows a rank wrote, made durable, and checksummed.
struct WrittenBlock {
    size_t tensor = 0;
    int64_t row_begin = 0;
    int64_t row_end = 0;
    size_t file = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    uint64_t hash = 0;  // xxh64 of the bytes
};

// Each rank appends its finished blocks to <staging>/.vmerge-journal/rank-<r> after the data
// is on disk, so `--resume` knows what an interrupted merge finished and can check it.
std::string journal_dir(const std::string& staging);

// A fingerprint of the output plan (file names, sizes, headers): resuming under another plan
// would mix two different merges.
std::string plan_fingerprint(const OutputLayout& layout);
void write_plan_fingerprint(const std::string& staging, const OutputLayout& layout);
// Throws Error when the staging folder was made for another plan.
void check_plan_fingerprint(const std::string& staging, const OutputLayout& layout);

class JournalWriter {
public:
    JournalWriter(const std::string& staging, int rank);
    ~JournalWriter();
    JournalWriter(const JournalWriter&) = delete;
    JournalWriter& operator=(const JournalWriter&) = delete;
    void append(const WrittenBlock& block);

private:
    std::string path_;
    int fd_ = -1;
};

// Every block recorded by every rank (torn last lines of a killed rank are ignored).
std::vector<WrittenBlock> read_journals(const std::string& staging);

using BlockKey = std::tuple<size_t, int64_t, int64_t>;
std::map<BlockKey, WrittenBlock> blocks_by_key(const std::vector<WrittenBlock>& blocks);

// The sidecar `vmerge.checksums.json` that `merge` leaves in the output and `verify` checks:
// per file its size, the header's hash and every data block's offset, length and hash.
std::string checksums_json(const OutputLayout& layout, const std::vector<WrittenBlock>& blocks);
constexpr const char* kChecksumsFile = "vmerge.checksums.json";

// Checks `dir` against its checksum sidecar; returns one line per mismatching range (file and
// byte offsets), empty when all match. Throws Error when the sidecar is malformed.
std::vector<std::string> verify_checksums(const std::string& dir);

}  // namespace vmerge
