// load_inputs (mpi/merge_inputs.h): merge ranks drop the scans once mapped, inspect's rank 0 keeps
// them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "command_line.h"
#include "io/checksum.h"
#include "merge_inputs.h"
#include "single_rank_comm.h"
#include "torch/scan_serialization.h"

namespace vmerge {
namespace {

Options parse(std::vector<std::string> args) {
    args.insert(args.begin(), "vmerge-mpi");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return *parse_command_line(static_cast<int>(argv.size()), argv.data(), false);
}

// A merging rank keeps the mapping, not every file's scan; the --resume identity still
// covers the scans (their digest, taken before they are dropped).
TEST(ScanPruning, MergeRanksDropTheScansOnceMappedInspectKeepsThem) {
    const std::string fixture = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/fsdp2_w3";
    SingleRankComm comm;
    const MergeInputs inspected = load_inputs(parse({"inspect", "--local_dir", fixture}), comm);
    ASSERT_EQ(inspected.scans.size(), 3u);  // three rank files
    const MergeInputs merged = load_inputs(parse({"merge", "--local_dir", fixture, "--target_dir", "/nonexistent/x"}), comm);
    EXPECT_TRUE(merged.scans.empty());
    EXPECT_FALSE(merged.mapping().tensors.empty());
    EXPECT_EQ(merged.mapping().sources.size(), inspected.mapping().sources.size());
    const std::string all = serialize_scans(inspected.scans);
    EXPECT_EQ(merged.scans_digest, hex64(xxh64(all.data(), all.size())));
}

}  // namespace
}  // namespace vmerge
