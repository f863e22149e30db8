#include "routed_share_tally.h"

#include <algorithm>
#include <set>

#include "core/error.h"

namespace vmerge {

RoutedShareTally::RoutedShareTally(int ranks)
    : bytes_(static_cast<size_t>(ranks)), entries_(static_cast<size_t>(ranks)), files_(static_cast<size_t>(ranks)) {}

void RoutedShareTally::add_sender(const std::vector<ScannedFile>& mine, const StorageReaders& readers,
                                  const std::vector<std::string>& messages) {
    if (messages.size() != bytes_.size())
        throw Error("internal: " + std::to_string(messages.size()) + " routed messages for " +
                    std::to_string(bytes_.size()) + " ranks");
    for (size_t r = 0; r < messages.size(); ++r) bytes_[r] += messages[r].size();
    // A receiver opens each file an entry of its own is stored in; a file is scanned by one
    // sender, so the files of different senders are different files.
    std::vector<std::set<std::string>> opened(bytes_.size());
    for (const ScannedFile& file : mine) {
        for (const StateDictEntry& entry : file.tensors) {
            const auto it = readers.find({entry.tensor.storage.file, entry.tensor.storage.byte_offset});
            if (it == readers.end()) continue;
            for (const int rank : it->second) {
                ++entries_.at(static_cast<size_t>(rank));
                opened[rank].insert(entry.tensor.storage.file);
            }
        }
    }
    for (size_t r = 0; r < opened.size(); ++r) files_[r] += opened[r].size();
}

int rank_of_most(const std::vector<uint64_t>& values) {
    return values.empty() ? 0 : static_cast<int>(std::max_element(values.begin(), values.end()) - values.begin());
}

}  // namespace vmerge
