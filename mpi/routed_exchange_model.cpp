#include "routed_exchange_model.h"

#include <algorithm>
#include <string>

#include "core/stopwatch.h"
#include "plan/storage_readers.h"
#include "scan_routing.h"
#include "torch/scan_serialization.h"

namespace vmerge {

RoutedExchangeFigures model_routed_exchange(const KeptRankMessages& kept, const TensorMapping& mapping,
                                            const std::vector<std::vector<WriteTask>>& work) {
    RoutedExchangeFigures figures;
    const int ranks = static_cast<int>(work.size());
    auto start = Clock::now();
    const StorageReaders readers = storage_readers(mapping, work);
    figures.readers_seconds = seconds_since(start);
    // incoming[d]: the messages rank d receives, one per sender with something for it.
    std::vector<std::vector<std::string>> incoming(static_cast<size_t>(ranks));
    kept.for_each([&](int, std::string message) {
        const std::vector<ScannedFile> mine = deserialize_scans(message);  // what the rank scanned
        start = Clock::now();
        std::vector<std::string> outgoing = routed_scan_messages(mine, readers, ranks);
        figures.route_seconds = std::max(figures.route_seconds, seconds_since(start));
        uint64_t sent = 0;
        for (size_t d = 0; d < outgoing.size(); ++d) {
            sent += outgoing[d].size();
            if (!outgoing[d].empty()) incoming[d].push_back(std::move(outgoing[d]));
        }
        figures.sent_bytes_max = std::max(figures.sent_bytes_max, sent);
    });
    uint64_t all_bytes = 0, all_entries = 0;
    for (auto& messages : incoming) {
        uint64_t bytes = 0;
        for (const auto& m : messages) bytes += m.size();
        start = Clock::now();
        const std::vector<ScannedFile> received = received_scans(messages);
        const double seconds = seconds_since(start);
        uint64_t entries = 0;
        for (const auto& file : received) entries += file.tensors.size();
        if (bytes >= figures.received_bytes_max) {
            figures.received_bytes_max = bytes;
            figures.decode_seconds = seconds;
        }
        figures.entries_max = std::max(figures.entries_max, entries);
        all_bytes += bytes;
        all_entries += entries;
    }
    figures.received_bytes_mean = ranks > 0 ? static_cast<double>(all_bytes) / ranks : 0;
    figures.entries_mean = ranks > 0 ? static_cast<double>(all_entries) / ranks : 0;
    return figures;
}

}  // namespace vmerge
