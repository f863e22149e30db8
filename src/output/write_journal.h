#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "io/output_names.h"
#include "plan/output_layout.h"

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

// What a resumed merge must share with the interrupted one: the output plan (file names,
// sizes, headers) and the work split (ranks, block budget), since the journal records the
// blocks of that split. Resuming under another plan would mix two different merges.
// The inputs are part of it: a staging folder written from another checkpoint, or from this
// one before its files changed, must not be continued.
struct InputStamp {
    std::string path;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
};
struct ResumeIdentity {
    std::string plan;  // fingerprint of the output layout and of the values' recipe
    int ranks = 1;
    uint64_t max_memory = 0;
    std::vector<InputStamp> inputs;  // every input file: name, size, mtime
    std::string scans;               // fingerprint of the scanned metadata
};
// `values` names what changes the bytes without changing the layout (LoRA scales).
ResumeIdentity resume_identity(const OutputLayout& layout, int ranks, uint64_t max_memory,
                               const std::string& values = "");
// Size and mtime of each of `paths` (sorted, each once); Error when one cannot be stat'ed.
std::vector<InputStamp> stamp_inputs(std::vector<std::string> paths);
void write_resume_identity(const std::string& staging, const ResumeIdentity& identity);
// Throws Error, before anything is written, when the staging folder was made by another
// plan, split or inputs; the folder stays as it was.
void check_resume_identity(const std::string& staging, const ResumeIdentity& identity);

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

// Every block recorded by every rank. Each line carries its own checksum: a torn last line of
// a killed rank, or a line changed since, is ignored (that block is redone); when a block was
// recorded twice (a resumed run rewrote it), the later line is the truth.
std::vector<WrittenBlock> read_journals(const std::string& staging);

using BlockKey = std::tuple<size_t, int64_t, int64_t>;
std::map<BlockKey, WrittenBlock> blocks_by_key(const std::vector<WrittenBlock>& blocks);

// The sidecar kChecksumsFile (io/output_names.h) that `merge` leaves in the output and `verify`
// checks: per file its size, the header's hash and every data block's offset, length and hash.
std::string checksums_json(const OutputLayout& layout, const std::vector<WrittenBlock>& blocks);

// The same sidecar for files another library wrote whole (the HDF5 archive: HDF5 places its
// metadata itself, so blocks are not journaled as they are written): each of `names` in `dir`
// read back after it is closed, hashed in blocks of `block_bytes` (an empty "header" range).
std::string file_checksums_json(const std::string& dir, const std::vector<std::string>& names,
                                uint64_t block_bytes = 64ull << 20);

// Checks `dir` against its checksum sidecar; returns one line per mismatching range (file and
// byte offsets), empty when all match. Throws Error when the sidecar is malformed.
std::vector<std::string> verify_checksums(const std::string& dir);

}  // namespace vmerge
