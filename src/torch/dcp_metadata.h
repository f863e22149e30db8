#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_ref.h"

namespace vmerge {

// One saved piece of a tensor: its box in the global tensor and the bytes (a complete
// torch.save archive) that hold it.
struct DcpChunk {
    Shape offsets;
    Shape sizes;
    std::string file;  // absolute path of the .distcp file
    uint64_t offset = 0;
    uint64_t length = 0;
};

struct DcpTensor {
    std::string fqn;
    DType dtype = DType::F32;
    Shape size;
    std::vector<DcpChunk> chunks;
};

struct DcpMetadata {
    std::string dir;
    std::vector<DcpTensor> tensors;       // in .metadata order
    std::vector<std::string> byte_items;  // fqns of BytesStorageMetadata items (pickled objects)
};

// Reads <dir>/.metadata (docs/reference/torch-formats.md §4): tensor sizes, dtypes, chunks, and
// where each chunk lives. Every chunk must have its storage entry, inside an existing file.
DcpMetadata read_dcp_metadata(const std::string& dir);

}  // namespace vmerge
