// ZipArchive::open on arbitrary bytes, then every record read back: only vmerge::Error may
// come out (anything else, a crash or a sanitizer report is a finding).
#include <cstddef>
#include <cstdint>

#include "fuzz_file.h"
#include "core/error.h"
#include "io/input_file.h"
#include "zip/zip_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        vmerge::InputFile file(vmerge_fuzz::input_as_file(data, size));
        const vmerge::ZipArchive archive = vmerge::ZipArchive::open(file);
        for (const vmerge::ZipRecord& record : archive.records()) {
            if (record.size <= (1u << 20)) (void)archive.read(file, record);
        }
        (void)archive.find("data.pkl");
    } catch (const vmerge::Error&) {
    }
    return 0;
}
