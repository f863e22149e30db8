// read_debug_knobs (mpi/debug_knobs.h): the tests' and benchmarks' settings, read from the
// environment once, with what an unset or unreadable value gives.
#include <stdlib.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "debug_knobs.h"

namespace vmerge {
namespace {

const char* const kKnobs[] = {"VMERGE_BENCH_SKIP_CRC", "VMERGE_TEST_BLOCK_DELAY_MS", "VMERGE_TEST_FREE_BYTES"};

// Sets the knobs for one test and leaves the environment as it found it.
class DebugKnobsTest : public ::testing::Test {
protected:
    void SetUp() override {
        for (const char* name : kKnobs) {
            const char* value = ::getenv(name);
            saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
            ::unsetenv(name);
        }
    }
    void TearDown() override {
        for (size_t i = 0; i < saved_.size(); ++i) {
            if (saved_[i]) ::setenv(kKnobs[i], saved_[i]->c_str(), 1);
            else ::unsetenv(kKnobs[i]);
        }
    }
    std::vector<std::optional<std::string>> saved_;
};

TEST_F(DebugKnobsTest, NoneSetIsNone) {
    const DebugKnobs knobs = read_debug_knobs();
    EXPECT_FALSE(knobs.skip_crc);
    EXPECT_EQ(knobs.block_delay_ms, 0);
    EXPECT_FALSE(knobs.free_bytes);
}

TEST_F(DebugKnobsTest, EachIsReadFromItsVariable) {
    ::setenv("VMERGE_BENCH_SKIP_CRC", "", 1);  // set, whatever its value
    ::setenv("VMERGE_TEST_BLOCK_DELAY_MS", "150", 1);
    ::setenv("VMERGE_TEST_FREE_BYTES", "1000", 1);
    const DebugKnobs knobs = read_debug_knobs();
    EXPECT_TRUE(knobs.skip_crc);
    EXPECT_EQ(knobs.block_delay_ms, 150);
    EXPECT_EQ(knobs.free_bytes, std::optional<uint64_t>(1000));
}

TEST_F(DebugKnobsTest, ValuesOutOfBoundsOrNotNumbersCountAsZero) {
    ::setenv("VMERGE_TEST_BLOCK_DELAY_MS", "600001", 1);
    ::setenv("VMERGE_TEST_FREE_BYTES", "lots", 1);
    const DebugKnobs knobs = read_debug_knobs();
    EXPECT_EQ(knobs.block_delay_ms, 0);
    EXPECT_EQ(knobs.free_bytes, std::optional<uint64_t>(0));  // set: the file system is taken to be full
}

}  // namespace
}  // namespace vmerge
