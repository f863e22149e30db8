#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor_ref.h"

namespace vmerge {

// What the scan all-gather costs one rank of a merge over `ranks` ranks, measured by doing
// it in this process: every rank's message encoded as that rank would (files r, r+P, ...),
// then all of them decoded as every rank does (gathered_scans). inspect --simulate reports it
// with the mapping and planning that follow (docs/scaling.md).
struct ScanExchangeFigures {
    int ranks = 0;
    size_t files = 0;
    size_t entries = 0;                  // tensor entries in all scans
    uint64_t received_bytes = 0;         // every message: what each rank receives and parses
    uint64_t largest_message_bytes = 0;  // the largest rank's contribution
    double encode_seconds = 0;           // the largest rank's encoding of its own message
    double decode_seconds = 0;           // decoding every message (each rank does it all)
    double map_seconds = 0;              // the backend's mapping of the decoded scans
    double plan_seconds = 0;             // output layout and every rank's rows
    // What the plan asks of the file system: input files each rank opens (input_files_per_rank).
    size_t input_files_max = 0;
    double input_files_mean = 0;
    uint64_t rank_file_opens = 0;        // (rank, input file) pairs over all ranks
    // Resident memory from the exchange on (the simulated checkpoint built before it freed):
    // the received messages, the decoded scans, the mapping and the plan, as a rank holds them.
    bool peak_measured = false;          // false: the kernel keeps no resettable peak
    uint64_t resident_before_bytes = 0;  // with the messages received, before decoding them
    uint64_t resident_peak_bytes = 0;    // read after planning
};

// What routing the scanned entries to the ranks whose shares copy them (mpi/scan_routing.h)
// would cost the same merge, in place of the all-gather: every rank's own scans split by the
// plan's storage readers, as the P ranks' messages of one Comm::alltoall (docs/scaling.md,
// "Routed planning"). Measured after the all-gather figures, so it does not change them.
struct RoutedExchangeFigures {
    uint64_t received_bytes_max = 0;   // the rank receiving the most
    double received_bytes_mean = 0;
    uint64_t entries_max = 0;          // tensor entries the rank receiving the most entries gets
    double entries_mean = 0;
    uint64_t sent_bytes_max = 0;       // the rank sending the most (the one scanning the most)
    double readers_seconds = 0;        // storage_readers over the whole plan (every rank does it)
    double route_seconds = 0;          // the slowest rank's split and encoding of its own scans
    double decode_seconds = 0;         // decoding what the rank receiving the most bytes got
};

// Each rank's own scans as the all-gather encodes them, kept out of memory (a temporary file)
// so the routed model can read them back after the all-gather's peak is measured.
class KeptRankMessages {
public:
    KeptRankMessages();
    void add(const std::string& message);
    // The messages in rank order, one at a time.
    void for_each(const std::function<void(int rank, std::string message)>& visit) const;

private:
    std::shared_ptr<std::FILE> file_;
    int count_ = 0;
};

// Encodes `scans` as the messages of `ranks` ranks, frees `scans`, and decodes the messages
// back into scans in file order, filling `figures` (all but map, plan and the peak, which the
// caller reads after its planning). `keep`, when given, receives every rank's message.
std::vector<ScannedFile> exchange_scans_as_ranks(std::vector<ScannedFile> scans, int ranks, ScanExchangeFigures& figures,
                                                 KeptRankMessages* keep = nullptr);

}  // namespace vmerge
