// io/read_once.h: detection's reads on rank 0, recorded, and replayed on the others.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/input_file.h"
#include "io/read_once.h"
#include "io/small_file.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::TempDir;

using testing::error_of;
// Detection's reads on rank 0, replayed on the others: the same texts and the same errors,
// without the files being opened again.
TEST(SharedFiles, RecordedReadsAnswerTheOtherRanks) {
    TempDir dir;
    dir.touch("fsdp_config.json", R"({"world_size": 2})");
    dir.touch("big.json", std::string(100, ' '));
    const std::string config = dir.path() + "/fsdp_config.json", big = dir.path() + "/big.json";
    start_recording_reads();
    EXPECT_EQ(read_small_file(config, 1000, "a JSON file"), R"({"world_size": 2})");
    const std::string too_big = error_of([&] { read_small_file(big, 10, "a JSON file"); });
    const std::vector<SmallFile> recorded = stop_recording_reads();
    ASSERT_EQ(recorded.size(), 2u);
    ASSERT_NE(too_big.find("more than the 10 bytes"), std::string::npos);
    std::filesystem::remove(config);
    std::filesystem::remove(big);
    dir.touch("other.json", "{}");
    {
        const ReplayedReads replayed(deserialize_small_files(serialize_small_files(recorded)));
        EXPECT_EQ(read_small_file(config, 1000, "a JSON file"), R"({"world_size": 2})");  // the file is gone
        EXPECT_EQ(error_of([&] { read_small_file(big, 10, "a JSON file"); }), too_big);
        EXPECT_EQ(read_small_file(dir.path() + "/other.json", 10, "a JSON file"), "{}");  // not recorded: read
    }
    EXPECT_NE(error_of([&] { read_small_file(config, 1000, "a JSON file"); }), "");  // replay over: read again
    EXPECT_TRUE(stop_recording_reads().empty());  // nothing recorded outside a recording
}

}  // namespace
}  // namespace vmerge
