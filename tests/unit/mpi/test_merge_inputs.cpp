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
// covers the scans (their digest, taken before they are dropped). Planned from the all-gather:
// the digest of every scan.
TEST(ScanPruning, MergeRanksDropTheScansOnceMappedInspectKeepsThem) {
    const std::string fixture = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/fsdp2_w3";
    SingleRankComm comm;
    const MergeInputs inspected = load_inputs(parse({"inspect", "--local_dir", fixture}), comm);
    ASSERT_EQ(inspected.scans.size(), 3u);  // three rank files
    Options gathered = parse({"merge", "--local_dir", fixture, "--target_dir", "/nonexistent/x"});
    gathered.debug.allgather_planning = true;
    const MergeInputs merged = load_inputs(gathered, comm);
    EXPECT_EQ(merged.planning, "all-gather");
    EXPECT_EQ(merged.entries_received, 81u);
    EXPECT_TRUE(merged.scans.empty());
    EXPECT_FALSE(merged.mapping().tensors.empty());
    EXPECT_EQ(merged.mapping().sources.size(), inspected.mapping().sources.size());
    const std::string all = serialize_scans(inspected.scans);
    EXPECT_EQ(merged.scans_digest, hex64(xxh64(all.data(), all.size())));
}

// Planned routed (an FSDP2 save, one rank: it receives every non-empty shard): no scans kept
// either, the same output tensors, and the digest of every file's scan digest in file order.
TEST(ScanPruning, ARoutedMergeDigestsEveryFilesScan) {
    const std::string fixture = std::string(VMERGE_SOURCE_DIR) + "/tests/fixtures/torch2/fsdp2_w3";
    SingleRankComm comm;
    const MergeInputs inspected = load_inputs(parse({"inspect", "--local_dir", fixture}), comm);
    const MergeInputs merged = load_inputs(parse({"merge", "--local_dir", fixture, "--target_dir", "/nonexistent/x"}), comm);
    EXPECT_EQ(merged.planning, "routed") << merged.planning_note;
    EXPECT_TRUE(merged.scans.empty());
    ASSERT_EQ(merged.mapping().tensors.size(), inspected.mapping().tensors.size());
    for (size_t i = 0; i < merged.mapping().tensors.size(); ++i) {
        EXPECT_EQ(merged.mapping().tensors[i].name, inspected.mapping().tensors[i].name);
        EXPECT_EQ(merged.mapping().tensors[i].shape, inspected.mapping().tensors[i].shape);
        EXPECT_EQ(merged.mapping().tensors[i].copies.size(), inspected.mapping().tensors[i].copies.size());
    }
    std::string digests;
    for (const ScannedFile& file : inspected.scans) {
        const std::string scan = serialize_scans({file});
        const uint64_t digest = xxh64(scan.data(), scan.size());
        for (int b = 0; b < 8; ++b) digests.push_back(static_cast<char>((digest >> (8 * b)) & 0xff));
    }
    EXPECT_EQ(merged.scans_digest, hex64(xxh64(digests.data(), digests.size())));
}

}  // namespace
}  // namespace vmerge
