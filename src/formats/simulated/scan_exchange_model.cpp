#include "formats/simulated/scan_exchange_model.h"

#include <algorithm>

#include "core/error.h"
#include "core/resident_memory.h"
#include "core/stopwatch.h"
#include "torch/scan_serialization.h"

namespace vmerge {

KeptRankMessages::KeptRankMessages() : file_(std::tmpfile(), [](std::FILE* f) { if (f) std::fclose(f); }) {
    if (!file_) throw Error("inspect --simulate: cannot create a temporary file for the routed-exchange model");
}

void KeptRankMessages::add(const std::string& message) {
    const uint64_t length = message.size();
    if (std::fwrite(&length, sizeof length, 1, file_.get()) != 1 ||
        std::fwrite(message.data(), 1, message.size(), file_.get()) != message.size())
        throw Error("inspect --simulate: cannot write the routed-exchange model's temporary file");
    ++count_;
}

void KeptRankMessages::for_each(const std::function<void(int, std::string)>& visit) const {
    std::rewind(file_.get());
    for (int rank = 0; rank < count_; ++rank) {
        uint64_t length = 0;
        std::string message;
        if (std::fread(&length, sizeof length, 1, file_.get()) == 1) {
            message.resize(length);
            if (std::fread(message.data(), 1, length, file_.get()) != length) length = 0;
        }
        if (message.size() != length)
            throw Error("inspect --simulate: cannot read back the routed-exchange model's temporary file");
        visit(rank, std::move(message));
    }
}

std::vector<ScannedFile> exchange_scans_as_ranks(std::vector<ScannedFile> scans, int ranks, ScanExchangeFigures& figures,
                                                 KeptRankMessages* keep) {
    figures.ranks = ranks;
    figures.files = scans.size();
    figures.entries = 0;
    for (const auto& s : scans) figures.entries += s.tensors.size();
    std::vector<std::string> messages(static_cast<size_t>(ranks));
    for (size_t r = 0; r < messages.size(); ++r) {
        const auto start = Clock::now();
        std::vector<ScannedFile> mine;  // a rank's own scans: built by its scan, moved here
        for (size_t i = r; i < scans.size(); i += messages.size()) mine.push_back(std::move(scans[i]));
        messages[r] = serialize_scans(mine);
        figures.encode_seconds = std::max(figures.encode_seconds, seconds_since(start));
        figures.received_bytes += messages[r].size();
        figures.largest_message_bytes = std::max<uint64_t>(figures.largest_message_bytes, messages[r].size());
        if (keep) keep->add(messages[r]);
    }
    const size_t files = scans.size();
    std::vector<ScannedFile>().swap(scans);
    // From here on the process holds what a rank holds: the messages it received.
    figures.peak_measured = reset_resident_peak();
    figures.resident_before_bytes = resident_bytes();
    const auto start = Clock::now();
    std::vector<ScannedFile> decoded = gathered_scans(messages, files);
    figures.decode_seconds = seconds_since(start);
    return decoded;
}

}  // namespace vmerge
