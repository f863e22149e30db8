#pragma once
#include <cstdint>
#include <optional>

namespace vmerge {

// Settings that only tests and benchmarks make, through the environment: read once, in main
// (read_debug_knobs), and carried in the Options to where they act. Nothing else reads them.
struct DebugKnobs {
    // VMERGE_BENCH_SKIP_CRC set (any value): the copy does not CRC-check what it reads, only to
    // measure what the check costs (docs/usage.md, docs/performance.md); never for real merges.
    bool skip_crc = false;
    // VMERGE_TEST_BLOCK_DELAY_MS: every written block is followed by this pause, so tests can
    // kill a rank or interrupt a merge while it is writing (0..600000; otherwise 0).
    int block_delay_ms = 0;
    // VMERGE_TEST_FREE_BYTES: what the target's file system is taken to have free, in place of
    // what it reports (0..2^63-1; a value that is not a number counts as 0).
    std::optional<uint64_t> free_bytes;
    // VMERGE_TEST_ALLGATHER_PLANNING set (any value): a merge plans from every rank's scans
    // (the all-gather) even where the routed planning applies, so tests can compare the two.
    bool allgather_planning = false;
    // VMERGE_TEST_S3_PART_SIZE: the multipart part size of a merge into a bucket, in bytes
    // (1..2^40; otherwise the default), so the tests' small models span several parts (their
    // server is told to take parts under S3's 5 MiB minimum).
    uint64_t s3_part_size = 0;
};

// The knobs the environment sets.
DebugKnobs read_debug_knobs();

}  // namespace vmerge
