#pragma once
// Small builders the unit tests share.
#include <stdlib.h>

#include <exception>
#include <filesystem>
#include <fstream>
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

}  // namespace vmerge::testing
