#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace vmerge {

// What one rank sees of one input file: enough to tell that two ranks see different bytes
// under one name (a file replaced or still being written, nodes with different copies) and
// that two names hold the same bytes (a rank file that is a link to, or a copy of, another
// rank's file, which would merge one shard twice and another never).
struct InputFingerprint {
    std::string path;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    uint64_t device = 0;
    uint64_t inode = 0;
    // XXH64 of kInputSampleWindows windows of kInputSampleBytes spread evenly over the file
    // (the whole file when it is smaller): equal for equal files, and different for two rank
    // files of a trained model however alike their headers are.
    uint64_t sample_hash = 0;
    std::string link_target;  // what `path` links to, when it is a symbolic link
    int rank = 0;             // who took it
    std::string host;
};

inline constexpr int kInputSampleWindows = 8;
inline constexpr uint64_t kInputSampleBytes = 16 << 10;

// Stats and samples `path` (Error naming it when it cannot be read).
InputFingerprint fingerprint_input(const std::string& path);

std::string serialize_fingerprints(const std::vector<InputFingerprint>& prints);
std::vector<InputFingerprint> deserialize_fingerprints(const std::string& message);

// Error unless every fingerprint of one path agrees on size, modification time and samples,
// naming the path, the two ranks (and hosts) and what differs. Pure.
void check_ranks_agree(const std::vector<InputFingerprint>& prints);

// The pairs of different paths that may hold the same bytes (one file under two names is
// such a pair too): the same non-zero size and samples. Each pair once, in path order. Pure.
std::vector<std::pair<InputFingerprint, InputFingerprint>> same_input_candidates(const std::vector<InputFingerprint>& prints);

// Error when the two files of a candidate pair hold the same bytes (compared in full), naming
// both and, where one is a link, what it links to.
void refuse_same_bytes(const InputFingerprint& a, const InputFingerprint& b);

}  // namespace vmerge
