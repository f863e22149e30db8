// read_safetensors_header on arbitrary bytes.
#include <cstddef>
#include <cstdint>

#include "fuzz_file.h"
#include "core/error.h"
#include "safetensors/safetensors_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        (void)vmerge::read_safetensors_header(vmerge_fuzz::input_as_file(data, size));
    } catch (const vmerge::Error&) {
    }
    return 0;
}
