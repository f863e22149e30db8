#pragma once
#include <vector>

#include "core/tensor_mapping.h"
#include "formats/simulated/scan_exchange_model.h"
#include "plan/rank_work.h"

namespace vmerge {

// inspect --simulate: what routing the scans (scan_routing.h) in place of the all-gather would
// cost the merge planned by `work`, with the same functions a routed merge runs: storage_readers
// over the plan, each rank's own scans (`kept`) split by routed_scan_messages, and each rank's
// messages decoded by received_scans, in this process, one rank after another.
RoutedExchangeFigures model_routed_exchange(const KeptRankMessages& kept, const TensorMapping& mapping,
                                            const std::vector<std::vector<WriteTask>>& work);

}  // namespace vmerge
