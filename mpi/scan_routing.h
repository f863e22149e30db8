#pragma once
#include <string>
#include <vector>

#include "comm.h"
#include "core/tensor_ref.h"
#include "plan/storage_readers.h"

namespace vmerge {

// Routing scanned entries to the ranks whose shares copy them, in place of every rank
// receiving every scan (docs/scaling.md, "Routed planning"): rank r, having scanned its files,
// sends each rank only the entries whose stored records that rank's share reads.

// One message per rank (`ranks` of them, rank order): the entries of `mine` each rank reads,
// in scan order, as serialize_scans encodes them (each file with only those entries, and none
// of its skipped keys or metadata; a file with nothing for a rank is left out). An entry no
// share reads goes to no rank.
std::vector<std::string> routed_scan_messages(const std::vector<ScannedFile>& mine, const StorageReaders& readers,
                                              int ranks);

// The scans a rank received, in sender order and within a sender in scan order; each message
// is released once decoded.
std::vector<ScannedFile> received_scans(std::vector<std::string>& messages);

// Both over `comm`: this rank's scans out, the entries its share reads in.
std::vector<ScannedFile> route_scans(Comm& comm, const std::vector<ScannedFile>& mine, const StorageReaders& readers);

}  // namespace vmerge
