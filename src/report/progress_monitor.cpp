#include "report/progress_monitor.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/human_units.h"
#include "core/stopwatch.h"
#include "output/write_journal.h"

namespace vmerge {
namespace fs = std::filesystem;
void mark_rank_done(const std::string& staging, int rank) {
    std::ofstream(journal_dir(staging) + "/done-" + std::to_string(rank)) << "done\n";
}

ProgressMonitor::ProgressMonitor(std::string staging, uint64_t total_bytes, int ranks, int interval_seconds, bool live,
                                 std::ostream& out)
    : staging_(std::move(staging)), total_(total_bytes), ranks_(ranks), interval_(std::max(1, interval_seconds)),
      live_(live), out_(out), thread_([this] { run(); }) {}

ProgressMonitor::~ProgressMonitor() { stop(); }

void ProgressMonitor::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (live_ && printed_) out_ << "\n" << std::flush;
}

ProgressMonitor::Snapshot ProgressMonitor::read_snapshot() const {
    Snapshot s;
    for (const auto& b : read_journals(staging_)) s.bytes += b.length;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(journal_dir(staging_), ec))
        if (entry.path().filename().string().starts_with("done-")) ++s.ranks_done;
    return s;
}

void ProgressMonitor::run() {
    const auto start = Clock::now();
    const uint64_t at_start = read_snapshot().bytes;  // a resumed merge starts part-way
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::seconds(interval_), [this] { return stopping_; })) {
        const Snapshot s = read_snapshot();
        const double elapsed = seconds_since(start);
        const double rate = elapsed > 0 ? static_cast<double>(s.bytes - std::min(s.bytes, at_start)) / elapsed : 0;
        const double percent = total_ ? 100.0 * static_cast<double>(s.bytes) / static_cast<double>(total_) : 100.0;
        std::ostringstream line;
        line << "vmerge: " << human_bytes(static_cast<double>(s.bytes)) << " of " << human_bytes(static_cast<double>(total_))
             << " (" << static_cast<int>(percent) << "%), " << human_bytes(rate) << "/s";
        if (rate > 0 && s.bytes < total_)
            line << ", ETA " << human_duration(static_cast<double>(total_ - s.bytes) / rate);
        line << ", ranks finished " << s.ranks_done << "/" << ranks_;
        printed_ = true;
        if (live_) out_ << "\r" << line.str() << "\033[K" << std::flush;
        else out_ << line.str() << "\n" << std::flush;
    }
}

}  // namespace vmerge
