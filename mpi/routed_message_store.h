#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace vmerge {

// The messages of a routed exchange modelled one sender at a time (routed_fsdp_simulation.h),
// kept out of memory (a temporary file) until the receiver modelled is known: all of them
// together are every routed entry (gigabytes for the largest saves).
class RoutedMessageStore {
public:
    explicit RoutedMessageStore(int ranks);
    // `message`, from the sender being added (senders in rank order), for rank `receiver`.
    void put(int receiver, const std::string& message);
    // What `receiver` was sent, in sender order (empty messages are not kept).
    std::vector<std::string> received_by(int receiver) const;
    // Forgets where every other rank's messages are (the index is a pair per message).
    void keep_only(const std::vector<int>& receivers);

private:
    std::shared_ptr<std::FILE> file_;
    uint64_t end_ = 0;
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> where_;  // per receiver: offset, length
};

}  // namespace vmerge
