// read_dcp_metadata on an arbitrary .metadata: the pickle layer, then what DCP's classes mean
// (sizes, chunks, storage entries, files). The folder beside it holds the real .distcp files of
// tests/fixtures/torch2/fsdp2_w2_dcp, so chunks that point at them reach the deepest checks.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "torch/dcp_metadata.h"
#include "core/error.h"

namespace {

// Removed when the fuzzer exits.
struct FuzzFolder {
    std::string path;
    ~FuzzFolder() {
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
};

const std::string& fuzz_folder() {
    static FuzzFolder folder;
    std::string& dir = folder.path;
    if (!dir.empty()) return dir;
    char name[] = "/tmp/vmerge-fuzz-dcp-XXXXXX";
    if (!::mkdtemp(name)) std::abort();
    dir = name;
    const std::filesystem::path real = std::filesystem::path(VMERGE_SOURCE_DIR) / "tests/fixtures/torch2/fsdp2_w2_dcp";
    for (const auto& e : std::filesystem::directory_iterator(real))
        if (e.path().extension() == ".distcp")
            std::filesystem::copy_file(e.path(), std::filesystem::path(dir) / e.path().filename());
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& dir = fuzz_folder();
    std::FILE* f = std::fopen((dir + "/.metadata").c_str(), "wb");
    if (!f || std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
    try {
        (void)vmerge::read_dcp_metadata(dir);
    } catch (const vmerge::Error&) {
    }
    return 0;
}
