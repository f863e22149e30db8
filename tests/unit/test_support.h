#pragma once
// Small builders the unit tests share.
#include <stdlib.h>

#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "architecture/architecture_table.h"
#include "core/tensor_mapping.h"

namespace vmerge::testing {

// The message of the error `f` throws (a vmerge::Error, a UsageError, any std::exception), or
// "" when it throws none: tests check the text, so a missing error fails them too.
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The shipped architecture tables, loaded once for the tests (a merge loads its own once).
inline const ArchitectureTables& shipped_tables() {
    static const ArchitectureTables tables = load_architecture_tables({});
    return tables;
}

// A fresh directory under the system temp folder, removed with everything in it.
class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "vmerge_test_XXXXXX").string();
        if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    void touch(const std::string& name, const std::string& content = "x") const {
        std::ofstream(path_ + "/" + name) << content;
    }

private:
    std::string path_;
};

inline OutputTensor tensor(std::string name, DType dtype, Shape shape) {
    OutputTensor t;
    t.name = std::move(name);
    t.source_dtype = dtype;
    t.dtype = dtype;
    t.shape = std::move(shape);
    return t;
}

inline Placement shard(int64_t dim) {
    Placement p;
    p.kind = Placement::Kind::Shard;
    p.dim = dim;
    return p;
}

inline Placement replicate() { return Placement{}; }

inline Placement strided(int64_t dim, int64_t split_factor) {
    Placement p;
    p.kind = Placement::Kind::StridedShard;
    p.dim = dim;
    p.split_factor = split_factor;
    return p;
}

inline DTensorLayout layout(Shape global, Shape mesh, Shape coords, std::vector<Placement> placements) {
    DTensorLayout l;
    l.global_shape = std::move(global);
    l.mesh_shape = std::move(mesh);
    l.coordinates = std::move(coords);
    l.placements = std::move(placements);
    for (size_t i = 0; i < l.mesh_shape.size(); ++i) l.mesh_dim_names.push_back("m" + std::to_string(i));
    return l;
}

// Scans and mappings built by hand, for the formats, mapping and exec tests.

// A plain tensor in its own storage record at `offset` of `file`.
inline TensorRef stored(Shape shape, const std::string& file, uint64_t offset) {
    TensorRef t;
    t.dtype = DType::F32;
    t.shape = shape;
    t.stride = contiguous_strides(shape);
    t.storage = {file, "data/" + std::to_string(offset), offset, static_cast<uint64_t>(numel(shape)) * 4, std::nullopt};
    return t;
}

inline ScannedFile scan_of(const std::string& path, std::vector<StateDictEntry> tensors, std::vector<SkippedEntry> skipped = {}) {
    ScannedFile f;
    f.path = path;
    f.tensors = std::move(tensors);
    f.skipped = std::move(skipped);
    return f;
}

// A mapping whose tensors each copy one whole source of the same shape.
inline TensorMapping mapping_of(const std::vector<std::pair<std::string, Shape>>& named) {
    TensorMapping m;
    for (const auto& [name, shape] : named) {
        OutputTensor t = testing::tensor(name, DType::BF16, shape);
        TensorRef ref;
        ref.dtype = DType::BF16;
        ref.shape = shape;
        ref.stride = shape.size() == 2 ? Shape{shape[1], 1} : Shape{1};
        ref.storage = {"/ckpt/rank0.pt", "data/" + std::to_string(m.sources.size()), 0, static_cast<uint64_t>(numel(shape)) * 2, std::nullopt};
        t.copies.push_back({static_cast<uint32_t>(m.sources.size()), Shape(shape.size(), 0), Shape(shape.size(), 0), shape});
        m.sources.push_back(ref);
        m.tensors.push_back(t);
    }
    return m;
}

inline TensorMapping mapping_of(std::vector<OutputTensor> tensors) {
    TensorMapping m;
    m.tensors = std::move(tensors);
    return m;
}

// A contiguous tensor of `file`'s first storage record.
inline TensorRef plain(Shape shape, const std::string& file, DType dtype = DType::F32) {
    TensorRef t;
    t.dtype = dtype;
    t.shape = shape;
    t.stride = contiguous_strides(shape);
    t.storage.file = file;
    t.storage.key = "data/0";
    t.storage.byte_size = static_cast<uint64_t>(numel(shape)) * element_size(dtype);
    return t;
}

// CRC-32 bit by bit (ZIP's reflected polynomial 0xEDB88320): independent of zlib.
inline uint32_t reference_crc32(const std::string& bytes) {
    uint32_t crc = 0xFFFFFFFF;
    for (const unsigned char byte : bytes) {
        crc ^= byte;
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

// The bytes of a file, read whole with the standard library (not InputFile).
inline std::string read_whole_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace vmerge::testing
