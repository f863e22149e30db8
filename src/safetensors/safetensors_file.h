#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_ref.h"

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

// The writer's side of the header rules: every tensor a header is planned with must be
// loadable by the reference reader. A name '__metadata__' (the reader takes it for the
// metadata map) or a name given twice (JSON keeps one of them), a shape whose element count or
// byte size overflows 64 bits, or a byte size that is not the data planned for it would each
// write a file readers refuse or misread. Throws Error naming the tensor and the file.
class SafetensorsHeaderCheck {
public:
    explicit SafetensorsHeaderCheck(std::string file) : file_(std::move(file)) {}
    // Checks one tensor planned with `nbytes` bytes of data; returns the data end offset.
    uint64_t add(const std::string& name, DType dtype, const Shape& shape, uint64_t nbytes);

private:
    std::string file_;
    std::set<std::string> names_;
    uint64_t end_ = 0;
};

// Reads and checks a header by the rules the reference reader enforces
// (docs/reference/output-formats.md §1.3): sizes, JSON, dtypes, contiguous offsets, byte counts,
// file length. Throws Error.
SafetensorsFile read_safetensors_header(const std::string& path);

// A Hugging Face weights folder: model.safetensors, or shards listed by the index.
struct HfWeights {
    std::vector<SafetensorsFile> files;
    std::map<std::string, std::pair<size_t, size_t>> by_name;  // name -> (file, entry)
};

// Reads every header of `dir` and checks the index against the files. Throws Error.
HfWeights read_hf_weights(const std::string& dir);

}  // namespace vmerge
