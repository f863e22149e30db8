// The routed-exchange model of inspect --simulate (mpi/routed_exchange_model.h) on the
// hand-worked example of plan/storage_readers_example.h: the figures are those of the messages
// route_scans would exchange.
#include <gtest/gtest.h>

#include "plan/storage_readers_example.h"
#include "routed_exchange_model.h"
#include "scan_routing.h"
#include "torch/scan_serialization.h"

namespace vmerge {
namespace {

TEST(RoutedExchangeModel, CountsWhatEachRankWouldReceive) {
    const testing::RoutingExample x = testing::routing_example();
    KeptRankMessages kept;  // three ranks: rank 0 scanned f0.pt, rank 1 f1.pt, rank 2 nothing
    kept.add(serialize_scans({x.scans[0]}));
    kept.add(serialize_scans({x.scans[1]}));
    kept.add(serialize_scans({}));
    const RoutedExchangeFigures figures = model_routed_exchange(kept, x.mapping, x.work);
    // The oracle: the messages themselves, each rank's summed.
    const StorageReaders readers = storage_readers(x.mapping, x.work);
    const auto from0 = routed_scan_messages({x.scans[0]}, readers, 3), from1 = routed_scan_messages({x.scans[1]}, readers, 3);
    uint64_t most = 0, all = 0;
    for (int r = 0; r < 3; ++r) {
        most = std::max<uint64_t>(most, from0[r].size() + from1[r].size());
        all += from0[r].size() + from1[r].size();
    }
    EXPECT_EQ(figures.received_bytes_max, most);
    EXPECT_DOUBLE_EQ(figures.received_bytes_mean, all / 3.0);
    EXPECT_EQ(figures.entries_max, 5u);            // rank 2: b, c from f0.pt; b, lora_A, lora_B from f1.pt
    EXPECT_DOUBLE_EQ(figures.entries_mean, 3.0);   // 1 + 3 + 5 entries
    EXPECT_EQ(figures.sent_bytes_max, std::max(from0[0].size() + from0[1].size() + from0[2].size(),
                                               from1[0].size() + from1[1].size() + from1[2].size()));
}

}  // namespace
}  // namespace vmerge
