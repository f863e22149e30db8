#include "formats/fsdp/fsdp_backend.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "torch/dtensor_placement.h"
#include "core/text_pattern.h"
#include "core/box_region.h"
#include "core/bounded_number.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "io/input_folder.h"
#include "io/input_file.h"
#include "io/json_file.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

const TextPattern kRankFile(R"(model_world_size_(\d+)_rank_(\d+)\.pt)");

std::string rank_file_name(int world, int rank) {
    return "model_world_size_" + std::to_string(world) + "_rank_" + std::to_string(rank) + ".pt";
}

// Adds the copies of one rank's shard of a DTensor.
void add_dtensor_copies(OutputTensor& out, uint32_t source, const TensorRef& shard,
                        const std::string& where) {
    for (BoxCopy& copy : dtensor_shard_boxes(shard, where)) {
        copy.source = source;
        out.copies.push_back(std::move(copy));
    }
}

}  // namespace

std::vector<BoxCopy> dtensor_shard_boxes(const TensorRef& shard, const std::string& where) {
    std::vector<BoxCopy> boxes;
    const auto runs = dtensor_runs(*shard.dtensor, where);
    for (size_t d = 0; d < runs.size(); ++d) {
        int64_t held = 0;
        for (const DimRun& r : runs[d]) held += r.length;
        if (held != shard.shape[d])
            throw Error(where + ": local shard is " + shape_to_string(shard.shape) + " but its placements give " +
                        std::to_string(held) + " on dim " + std::to_string(d) +
                        " of the global " + shape_to_string(shard.dtensor->global_shape));
    }
    // Every combination of one run per dim is one box.
    std::vector<size_t> index(runs.size(), 0);
    if (numel(shard.shape) == 0) return boxes;
    while (true) {
        BoxCopy copy;
        for (size_t d = 0; d < runs.size(); ++d) {
            const DimRun& r = runs[d][index[d]];
            copy.src_start.push_back(r.local);
            copy.dst_start.push_back(r.global);
            copy.extent.push_back(r.length);
        }
        boxes.push_back(std::move(copy));
        size_t d = runs.size();
        while (d > 0) {
            --d;
            if (++index[d] < runs[d].size()) break;
            index[d] = 0;
            if (d == 0) return boxes;
        }
        if (runs.empty()) return boxes;
    }
}

std::string fsdp_model_name(const std::string& key) {
    std::string name = key;
    for (const std::string wrapper : {"_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod."}) {
        // Only whole dotted segments: "x._orig_mod.y", never part of a longer segment.
        for (size_t at = name.find(wrapper); at != std::string::npos; at = name.find(wrapper, at)) {
            if (at == 0 || name[at - 1] == '.') name.erase(at, wrapper.size());
            else at += wrapper.size();
        }
    }
    if (name.starts_with("module.")) name.erase(0, 7);
    return name;
}

bool looks_like_fsdp(const std::string& dir) {
    for (const auto& entry : list_input_folder(dir))
        if (kRankFile.full_match(entry.name)) return true;
    return false;
}

FsdpCheckpoint discover_fsdp(const std::string& dir) {
    FsdpCheckpoint ckpt;
    ckpt.dir = dir;
    require_input_folder(dir, "the FSDP checkpoint folder");
    std::set<int> worlds;
    std::map<int, std::map<int, std::string>> files_by_world;
    for (const auto& entry : list_input_folder(dir)) {
        TextMatch m;
        const std::string& name = entry.name;
        if (kRankFile.full_match(name, m)) {
            const std::string path = join_path(dir, name);
            require_regular_file(path);
            const int world = static_cast<int>(parse_bounded_int(m.str(1), 1, kMaxWorldSize, path + ": world size"));
            const int rank = static_cast<int>(parse_bounded_int(m.str(2), 0, kMaxWorldSize - 1, path + ": rank"));
            worlds.insert(world);
            files_by_world[world][rank] = path;
        }
    }
    const std::string config_path = join_path(dir, "fsdp_config.json");
    if (path_exists(config_path)) {
        const nlohmann::json json = read_json_file(config_path);
        if (!json.is_object() || !json.contains("world_size") || !json["world_size"].is_number_integer())
            throw Error(config_path + ": no integer world_size");
        ckpt.world_size = static_cast<int>(json_int_within(json["world_size"], 1, kMaxWorldSize, config_path + ": world_size"));
        for (int w : worlds)
            if (w != ckpt.world_size)
                throw Error(dir + ": " + config_path + " says world_size " +
                            std::to_string(ckpt.world_size) + " but the folder holds " +
                            "model_world_size_" + std::to_string(w) + "_rank_*.pt files");
    } else {
        if (worlds.empty()) throw Error(dir + ": no model_world_size_*_rank_*.pt files and no fsdp_config.json");
        if (worlds.size() > 1)
            throw Error(dir + ": rank files of several world sizes and no fsdp_config.json to choose");
        ckpt.world_size = *worlds.begin();
        ckpt.world_size_inferred = true;
        ckpt.notes.push_back("no fsdp_config.json (older verl): world size " +
                             std::to_string(ckpt.world_size) + " taken from the file names");
    }
    for (int r = 0; r < ckpt.world_size; ++r) {
        auto& have = files_by_world[ckpt.world_size];
        auto it = have.find(r);
        if (it == have.end())
            throw Error(dir + "/" + rank_file_name(ckpt.world_size, r) + ": missing rank file (world size " +
                        std::to_string(ckpt.world_size) + ")");
        ckpt.rank_files.push_back(it->second);
    }
    for (const auto& [r, path] : files_by_world[ckpt.world_size])
        if (r >= ckpt.world_size)
            throw Error(path + ": rank " + std::to_string(r) + " is outside world size " +
                        std::to_string(ckpt.world_size));
    return ckpt;
}

TensorMapping map_fsdp(const std::vector<ScannedFile>& files, SourceLedger* ledger) {
    if (files.empty()) throw Error("no rank files to merge");
    TensorMapping mapping;
    OutputNames names(files[0].path);
    std::vector<std::map<std::string, const TensorRef*>> by_key(files.size());
    for (size_t r = 0; r < files.size(); ++r) {
        for (const auto& e : files[r].tensors) {
            if (!by_key[r].emplace(e.key, &e.tensor).second)
                throw Error(files[r].path + ": key '" + e.key + "' appears twice");
        }
        if (r == 0) continue;
        for (const auto& [key, _] : by_key[r])
            if (!by_key[0].count(key))
                throw Error(files[r].path + ": key '" + key + "' is not in " + files[0].path);
        for (const auto& [key, _] : by_key[0])
            if (!by_key[r].count(key))
                throw Error(files[r].path + ": key '" + key + "' of " + files[0].path + " is missing");
    }
    // Beside DTensors, a plain tensor is a module buffer FSDP does not shard (a router's
    // e_score_correction_bias): every rank saved it whole. A checkpoint of only plain tensors
    // holds dim-0 pieces, concatenated in rank order as verl's merger does.
    const bool buffers_replicated = std::any_of(files[0].tensors.begin(), files[0].tensors.end(),
                                                [](const auto& entry) { return entry.tensor.dtensor.has_value(); });
    for (const auto& first : files[0].tensors) {
        const std::string& key = first.key;
        const TensorRef& t0 = first.tensor;
        OutputTensor out;
        out.name = fsdp_model_name(key);
        names.claim(out.name, key);
        out.source_dtype = out.dtype = t0.dtype;
        if (t0.dtensor) out.shape = t0.dtensor->global_shape;
        int64_t rows = 0;
        // A DTensor on a sub-mesh (FSDP+TP: norms live on the "dp" mesh only) is saved by
        // every rank of the other mesh dims with the same coordinates, and an HSDP replica
        // by every rank of the replicate dim: read each shard once (the first saved), and
        // check the others hold the same values.
        std::map<Shape, const TensorRef*> shard_kept;
        for (size_t r = 0; r < files.size(); ++r) {
            const TensorRef& t = *by_key[r].at(key);
            const std::string where = files[r].path + " key '" + key + "'";
            if (t.dtype != t0.dtype)
                throw Error(where + ": dtype " + std::string(torch_name(t.dtype)) + " differs from " +
                            std::string(torch_name(t0.dtype)) + " in " + files[0].path);
            if (t.dtensor.has_value() != t0.dtensor.has_value())
                throw Error(where + ": is " + (t.dtensor ? "a DTensor" : "a plain tensor") + " but " +
                            (t0.dtensor ? "a DTensor" : "a plain tensor") + " in " + files[0].path);
            if (t.dtensor) {
                if (t.dtensor->global_shape != t0.dtensor->global_shape)
                    throw Error(where + ": global shape " + shape_to_string(t.dtensor->global_shape) +
                                " differs from " + shape_to_string(t0.dtensor->global_shape) + " in " +
                                files[0].path);
                const auto [kept, first_seen] = shard_kept.emplace(shard_position(*t.dtensor), &t);
                if (!first_seen) {
                    if (ledger) ledger->drop_replica(key, t, *kept->second);
                    continue;
                }
                const uint32_t source = static_cast<uint32_t>(mapping.sources.size());
                mapping.sources.push_back(t);
                add_dtensor_copies(out, source, t, where);
            } else if (buffers_replicated) {
                if (t.shape != t0.shape)
                    throw Error(where + ": shape " + shape_to_string(t.shape) + " differs from " + shape_to_string(t0.shape) +
                                " in " + files[0].path + " (a plain tensor beside DTensors is a buffer every rank holds whole)");
                if (r > 0) {
                    if (ledger) ledger->drop_replica(key, t, t0);
                    continue;
                }
                const uint32_t source = static_cast<uint32_t>(mapping.sources.size());
                mapping.sources.push_back(t);
                add_copy(out, source, Shape(t.shape.size(), 0), Shape(t.shape.size(), 0), t.shape);
                rows = t.shape.empty() ? 0 : t.shape[0];
            } else {
                if (t.shape.empty())
                    throw Error(where + ": a 0-d plain tensor cannot be concatenated on dim 0");
                if (Shape(t.shape.begin() + 1, t.shape.end()) !=
                    Shape(t0.shape.begin() + 1, t0.shape.end()))
                    throw Error(where + ": shape " + shape_to_string(t.shape) + " does not concatenate on dim 0 with " +
                                shape_to_string(t0.shape) + " in " + files[0].path);
                const uint32_t source = static_cast<uint32_t>(mapping.sources.size());
                mapping.sources.push_back(t);
                Shape dst(t.shape.size(), 0);
                dst[0] = rows;
                add_copy(out, source, Shape(t.shape.size(), 0), dst, t.shape);
                rows += t.shape[0];
            }
        }
        if (!t0.dtensor) {
            out.shape = t0.shape;
            if (!buffers_replicated) out.shape[0] = rows;
        }
        check_copies_tile_output(out, mapping.sources);
        mapping.tensors.push_back(std::move(out));
    }
    return mapping;
}

}  // namespace vmerge
