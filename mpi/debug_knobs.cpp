#include "debug_knobs.h"

#include <cstdint>
#include <cstdlib>

#include "core/bounded_number.h"

namespace vmerge {

DebugKnobs read_debug_knobs() {
    DebugKnobs knobs;
    knobs.skip_crc = std::getenv("VMERGE_BENCH_SKIP_CRC") != nullptr;
    if (const char* text = std::getenv("VMERGE_TEST_BLOCK_DELAY_MS"))
        knobs.block_delay_ms = static_cast<int>(parse_int_within(text, 0, 600000).value_or(0));
    if (const char* text = std::getenv("VMERGE_TEST_S3_PART_SIZE"))
        knobs.s3_part_size = static_cast<uint64_t>(parse_int_within(text, 1, int64_t{1} << 40).value_or(0));
    if (const char* text = std::getenv("VMERGE_TEST_FREE_BYTES"))
        knobs.free_bytes = static_cast<uint64_t>(parse_int_within(text, 0, INT64_MAX).value_or(0));
    knobs.allgather_planning = std::getenv("VMERGE_TEST_ALLGATHER_PLANNING") != nullptr;
    return knobs;
}

}  // namespace vmerge
