#include "routed_message_store.h"

#include <algorithm>

#include "core/error.h"

namespace vmerge {

RoutedMessageStore::RoutedMessageStore(int ranks)
    : file_(std::tmpfile(), [](std::FILE* f) { if (f) std::fclose(f); }), where_(static_cast<size_t>(ranks)) {
    if (!file_) throw Error("inspect --simulate: cannot create a temporary file for the routed messages");
}

void RoutedMessageStore::put(int receiver, const std::string& message) {
    if (message.empty()) return;
    if (std::fseek(file_.get(), 0, SEEK_END) != 0 ||
        std::fwrite(message.data(), 1, message.size(), file_.get()) != message.size())
        throw Error("inspect --simulate: cannot write the routed messages' temporary file (is the temporary folder full?)");
    where_.at(static_cast<size_t>(receiver)).emplace_back(end_, message.size());
    end_ += message.size();
}

std::vector<std::string> RoutedMessageStore::received_by(int receiver) const {
    std::vector<std::string> messages;
    std::fflush(file_.get());
    for (const auto& [offset, length] : where_.at(static_cast<size_t>(receiver))) {
        std::string message(length, '\0');
        if (std::fseek(file_.get(), static_cast<long>(offset), SEEK_SET) != 0 ||
            std::fread(message.data(), 1, length, file_.get()) != length)
            throw Error("inspect --simulate: cannot read back the routed messages' temporary file");
        messages.push_back(std::move(message));
    }
    return messages;
}

void RoutedMessageStore::keep_only(const std::vector<int>& receivers) {
    for (size_t r = 0; r < where_.size(); ++r)
        if (std::find(receivers.begin(), receivers.end(), static_cast<int>(r)) == receivers.end())
            std::vector<std::pair<uint64_t, uint64_t>>().swap(where_[r]);
}

}  // namespace vmerge
