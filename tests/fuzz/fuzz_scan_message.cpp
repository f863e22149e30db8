// deserialize_scans on arbitrary bytes: what a rank does with every message of the scan
// all-gather. A message it accepts must encode again to one that decodes to the same scans.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "torch/scan_serialization.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const auto scans = vmerge::deserialize_scans(std::string(reinterpret_cast<const char*>(data), size));
        const std::string again = vmerge::serialize_scans(scans);
        if (vmerge::serialize_scans(vmerge::deserialize_scans(again)) != again) std::abort();
    } catch (const vmerge::Error&) {
    }
    return 0;
}
