#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

namespace vmerge {

// Rank 0's progress display. It reads the write journals that every rank appends to anyway
// (bytes done, ranks finished), so the copy loop needs no barrier or message for it.
// `live` redraws one line (a terminal); otherwise a plain line every `interval_seconds`.
class ProgressMonitor {
public:
    ProgressMonitor(std::string staging, uint64_t total_bytes, int ranks, int interval_seconds, bool live,
                    std::ostream& out);
    ~ProgressMonitor();
    ProgressMonitor(const ProgressMonitor&) = delete;
    ProgressMonitor& operator=(const ProgressMonitor&) = delete;
    void stop();

private:
    struct Snapshot {
        uint64_t bytes = 0;
        int ranks_done = 0;
    };
    Snapshot read_snapshot() const;
    void run();

    std::string staging_;
    uint64_t total_;
    int ranks_;
    int interval_;
    bool live_;
    std::ostream& out_;
    std::mutex mutex_;
    std::condition_variable wake_;
    bool stopping_ = false;
    bool printed_ = false;
    std::thread thread_;
};

// Marks this rank's share as written (read by the monitor).
void mark_rank_done(const std::string& staging, int rank);

}  // namespace vmerge
