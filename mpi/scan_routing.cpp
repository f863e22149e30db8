#include "scan_routing.h"

#include <utility>

#include "torch/scan_serialization.h"

namespace vmerge {

std::vector<std::string> routed_scan_messages(const std::vector<ScannedFile>& mine, const StorageReaders& readers,
                                              int ranks) {
    // Per destination, the partial scans it gets; a file opens a partial scan for a rank at its
    // first entry for that rank.
    std::vector<std::vector<ScannedFile>> outgoing(static_cast<size_t>(ranks));
    for (const ScannedFile& file : mine) {
        std::vector<bool> opened(static_cast<size_t>(ranks), false);
        for (const StateDictEntry& entry : file.tensors) {
            const auto it = readers.find({entry.tensor.storage.file, entry.tensor.storage.byte_offset});
            if (it == readers.end()) continue;
            for (const int rank : it->second) {
                if (!opened[rank]) {
                    ScannedFile partial;
                    partial.path = file.path;
                    partial.chunks = file.chunks;
                    outgoing[rank].push_back(std::move(partial));
                    opened[rank] = true;
                }
                outgoing[rank].back().tensors.push_back(entry);
            }
        }
    }
    std::vector<std::string> messages(static_cast<size_t>(ranks));
    for (size_t r = 0; r < messages.size(); ++r) {
        if (!outgoing[r].empty()) messages[r] = serialize_scans(outgoing[r]);
        std::vector<ScannedFile>().swap(outgoing[r]);
    }
    return messages;
}

std::vector<ScannedFile> received_scans(std::vector<std::string>& messages) {
    std::vector<ScannedFile> scans;
    for (std::string& message : messages) {
        if (!message.empty())
            for (ScannedFile& file : deserialize_scans(message)) scans.push_back(std::move(file));
        std::string().swap(message);
    }
    return scans;
}

std::vector<ScannedFile> route_scans(Comm& comm, const std::vector<ScannedFile>& mine, const StorageReaders& readers) {
    std::vector<std::string> received = comm.alltoall(routed_scan_messages(mine, readers, comm.size()));
    return received_scans(received);
}

}  // namespace vmerge
