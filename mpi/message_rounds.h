#pragma once
#include <cstdint>

namespace vmerge {

// An all-to-all of messages of any size as a sequence of calls whose counts and displacements
// fit MPI's `int`: in each round every (sender, receiver) pair moves at most `pair_cap` more
// bytes of its message, so no rank sends or receives more than ranks × pair_cap bytes in one
// call.
struct MessageRounds {
    uint64_t pair_cap = 1;  // bytes per (sender, receiver) pair and round, ≥ 1
    uint64_t rounds = 0;    // rounds until the largest message has moved; 0 when all are empty
};

// The rounds for `ranks` ranks whose largest message (over every pair, agreed by all ranks) is
// `largest_message` bytes, when one call may move at most `max_call_bytes` per rank.
MessageRounds message_rounds(int ranks, uint64_t largest_message, uint64_t max_call_bytes);

// Bytes of a message of `size` bytes that round `round` moves (0 once it has all moved).
uint64_t round_bytes(const MessageRounds& rounds, uint64_t size, uint64_t round);

}  // namespace vmerge
