#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vmerge/dtype.h"
#include "vmerge/tensor_ref.h"

namespace vmerge {

struct SafetensorsEntry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
    uint64_t begin = 0;  // absolute byte offsets in the file
    uint64_t end = 0;
};

struct SafetensorsFile {
    std::string path;
    uint64_t data_start = 0;  // 8 + header length
    std::vector<SafetensorsEntry> entries;  // in data order
    std::map<std::string, std::string> metadata;
    std::vector<std::string> convention_warnings;  // legal for readers, unlike HF's writer
};

// Reads and checks a header by the rules the reference reader enforces (output-formats.md
// §1.5): sizes, JSON, dtypes, contiguous offsets, byte counts, file length. Throws Error.
SafetensorsFile read_safetensors_header(const std::string& path);

// A Hugging Face weights folder: model.safetensors, or shards listed by the index.
struct HfWeights {
    std::vector<SafetensorsFile> files;
    std::map<std::string, std::pair<size_t, size_t>> by_name;  // name -> (file, entry)
};

// Reads every header of `dir` and checks the index against the files. Throws Error.
HfWeights read_hf_weights(const std::string& dir);

}  // namespace vmerge
