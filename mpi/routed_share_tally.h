#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor_ref.h"
#include "plan/storage_readers.h"

namespace vmerge {

// What each rank of a routed exchange (scan_routing.h) receives, summed one sender at a time,
// so a model of the exchange never holds more than one sender's scans (inspect --simulate of a
// routed merge: routed_fsdp_simulation.h). Per receiving rank: the bytes of its messages, the
// entries they carry and the files those entries are stored in (the files it opens to copy).
class RoutedShareTally {
public:
    explicit RoutedShareTally(int ranks);
    // One sender: its scans (`mine`), their readers and the messages routed_scan_messages made
    // of them (one per rank).
    void add_sender(const std::vector<ScannedFile>& mine, const StorageReaders& readers,
                    const std::vector<std::string>& messages);
    const std::vector<uint64_t>& bytes() const { return bytes_; }
    const std::vector<uint64_t>& entries() const { return entries_; }
    const std::vector<uint64_t>& files() const { return files_; }

private:
    std::vector<uint64_t> bytes_, entries_, files_;
};

// The lowest rank holding the largest of `values` (0 for none).
int rank_of_most(const std::vector<uint64_t>& values);

}  // namespace vmerge
