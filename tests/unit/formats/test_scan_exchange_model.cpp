// The scan all-gather modelled in one process (formats/simulated/scan_exchange_model.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "formats/simulated/scan_exchange_model.h"
#include "torch/scan_serialization.h"
#include "torch/scan_entries.h"

namespace vmerge {
namespace {

using testing::entry;

ScannedFile named(const std::string& path) {
    ScannedFile s;
    s.path = path;
    s.tensors.push_back(entry("w", path, "data/0", {4}, 64, 8));
    return s;
}

TEST(ScanExchangeModel, ReceivesEveryRanksMessageAndGivesTheScansBack) {
    std::vector<ScannedFile> scans;
    for (int k = 0; k < 5; ++k) scans.push_back(named("f" + std::to_string(k)));
    uint64_t want_bytes = 0;
    for (const auto& group : {std::vector<ScannedFile>{named("f0"), named("f4")}, {named("f1")}, {named("f2")}, {named("f3")}})
        want_bytes += serialize_scans(group).size();
    ScanExchangeFigures figures;
    const auto back = exchange_scans_as_ranks(scans, 4, figures);
    ASSERT_EQ(back.size(), 5u);
    for (size_t k = 0; k < 5; ++k) EXPECT_EQ(back[k].path, "f" + std::to_string(k));
    EXPECT_EQ(figures.ranks, 4);
    EXPECT_EQ(figures.files, 5u);
    EXPECT_EQ(figures.entries, 5u);
    EXPECT_EQ(figures.received_bytes, want_bytes);
    EXPECT_EQ(figures.largest_message_bytes, serialize_scans({named("f0"), named("f4")}).size());
}

}  // namespace
}  // namespace vmerge
