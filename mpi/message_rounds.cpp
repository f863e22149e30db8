#include "message_rounds.h"

#include <algorithm>

#include "core/error.h"

namespace vmerge {

MessageRounds message_rounds(int ranks, uint64_t largest_message, uint64_t max_call_bytes) {
    if (ranks < 1) throw Error("alltoall: " + std::to_string(ranks) + " ranks");
    MessageRounds rounds;
    // A share of the call for every pair, at least one byte so that every round makes progress.
    rounds.pair_cap = std::max<uint64_t>(1, max_call_bytes / static_cast<uint64_t>(ranks));
    rounds.rounds = (largest_message + rounds.pair_cap - 1) / rounds.pair_cap;
    return rounds;
}

uint64_t round_bytes(const MessageRounds& rounds, uint64_t size, uint64_t round) {
    const uint64_t moved = round * rounds.pair_cap;
    if (moved >= size) return 0;
    return std::min(rounds.pair_cap, size - moved);
}

}  // namespace vmerge
