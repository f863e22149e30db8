// scan_torch_archive on an arbitrary file: ZIP directory, data.pkl, tensors and DTensors, then
// the scan serialised as vmerge does before the all-gather, and every tensor's byte count.
#include <cstddef>
#include <cstdint>

#include "fuzz_file.h"
#include "core/error.h"
#include "io/input_file.h"
#include "torch/scan_serialization.h"
#include "torch/torch_pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        vmerge::InputFile file(vmerge_fuzz::input_as_file(data, size));
        const vmerge::ScannedFile scanned = vmerge::scan_torch_archive(file, 0, 0);
        for (const auto& entry : scanned.tensors) {
            (void)entry.tensor.nbytes();
            (void)entry.tensor.is_contiguous();
        }
        (void)vmerge::deserialize_scan(vmerge::serialize_scan(scanned));
    } catch (const vmerge::Error&) {
    }
    return 0;
}
