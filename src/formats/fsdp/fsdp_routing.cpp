#include "formats/fsdp/fsdp_routing.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/fsdp/fsdp_backend.h"
#include "io/checksum.h"
#include "torch/dtensor_placement.h"
#include "torch/scan_serialization.h"

namespace vmerge {
namespace {

constexpr size_t kEmptyExamples = 3;  // as many as the dropped-entries note keeps per reason


std::string where_of(const ScannedFile& file, const std::string& key) { return file.path + " key '" + key + "'"; }

// Why one DTensor entry cannot be routed, against file 0's entry of its key ("" when it can).
std::string unroutable_entry(const TensorRef& t, const TensorRef& t0, size_t files) {
    if (!t.dtensor || !t0.dtensor) return "a plain tensor (the all-gather path concatenates or checks it)";
    if (t.dtype != t0.dtype) return "its dtype differs from file 0's";
    const DTensorLayout& d = *t.dtensor;
    if (d.global_shape != t0.dtensor->global_shape) return "its global shape differs from file 0's";
    int64_t mesh_ranks = 1;
    for (int64_t size : d.mesh_shape) mesh_ranks *= size;
    if (mesh_ranks != static_cast<int64_t>(files)) return "its mesh is not the whole world (a sub-mesh: replicas)";
    for (size_t m = 0; m < d.placements.size(); ++m) {
        const Placement::Kind kind = d.placements[m].kind;
        if (kind == Placement::Kind::Partial) return "a Partial placement";
        if (kind == Placement::Kind::Replicate && m < d.mesh_shape.size() && d.mesh_shape[m] > 1)
            return "replicated over a mesh dim (HSDP: replicas)";
    }
    return "";
}

}  // namespace

FsdpKeyIndex fsdp_key_index(const ScannedFile& first) {
    FsdpKeyIndex index;
    index.reserve(first.tensors.size());
    for (size_t i = 0; i < first.tensors.size(); ++i) index.emplace(first.tensors[i].key, static_cast<uint32_t>(i));
    return index;
}

FsdpFileCheck check_fsdp_file(const ScannedFile& file, size_t index, const ScannedFile& first, size_t files) {
    FsdpFileCheck check;
    check.file = index;
    check.entries = file.tensors.size();
    const std::string scan = serialize_scans(std::vector<ScannedFile>{file});
    check.scan_digest = xxh64(scan.data(), scan.size());
    auto refuse = [&](const std::string& why) {
        check.unroutable = file.path + ": " + why;
        return check;
    };
    if (!file.skipped.empty() || !file.metadata.empty()) return refuse("holds entries that are not tensors");
    if (file.tensors.size() != first.tensors.size()) return refuse("holds another number of keys than file 0");
    const FsdpKeyIndex keys = fsdp_key_index(first);
    std::vector<char> seen(first.tensors.size(), 0);
    std::set<std::pair<std::string, uint64_t>> records;
    for (const StateDictEntry& e : file.tensors) {
        const auto it = keys.find(e.key);
        if (it == keys.end() || seen[it->second]) return refuse("key '" + e.key + "' is not file 0's or appears twice");
        seen[it->second] = 1;
        if (const std::string why = unroutable_entry(e.tensor, first.tensors[it->second].tensor, files); !why.empty())
            return refuse("key '" + e.key + "': " + why);
        const Shape position = shard_position(*e.tensor.dtensor);
        if (&e == &file.tensors.front()) check.position = position;
        else if (position != check.position) return refuse("key '" + e.key + "' holds another shard position");
        try {
            dtensor_shard_boxes(e.tensor, where_of(file, e.key));
        } catch (const Error& error) {
            return refuse(error.what());
        }
        if (!records.emplace(e.tensor.storage.file, e.tensor.storage.byte_offset).second)
            return refuse("key '" + e.key + "' shares its storage with another key");
        if (numel(e.tensor.shape) != 0) continue;
        ++check.empty_shards;
        if (check.empty_examples.size() < kEmptyExamples) check.empty_examples.push_back(where_of(file, e.key));
    }
    return check;
}

std::string serialize_file_checks(const std::vector<FsdpFileCheck>& checks) {
    nlohmann::json list = nlohmann::json::array();
    for (const FsdpFileCheck& c : checks)
        list.push_back({{"file", c.file}, {"unroutable", c.unroutable}, {"position", c.position},
                        {"entries", c.entries}, {"empty", c.empty_shards}, {"examples", c.empty_examples},
                        {"digest", c.scan_digest}});
    return list.dump();
}

std::vector<FsdpFileCheck> deserialize_file_checks(const std::string& text) {
    std::vector<FsdpFileCheck> checks;
    // Written by another rank of this same vmerge: a parse failure is an internal error.
    try {
        for (const auto& j : nlohmann::json::parse(text)) {
            FsdpFileCheck c;
            c.file = j.at("file").get<size_t>();
            c.unroutable = j.at("unroutable").get<std::string>();
            c.position = j.at("position").get<Shape>();
            c.entries = j.at("entries").get<size_t>();
            c.empty_shards = j.at("empty").get<size_t>();
            c.empty_examples = j.at("examples").get<std::vector<std::string>>();
            c.scan_digest = j.at("digest").get<uint64_t>();
            checks.push_back(std::move(c));
        }
    } catch (const nlohmann::json::exception& e) {
        throw Error(std::string("internal: malformed routing check message: ") + e.what());
    }
    return checks;
}

std::string routing_verdict(const std::vector<FsdpFileCheck>& checks, size_t files) {
    if (checks.size() != files) return "internal: " + std::to_string(checks.size()) + " file checks for " +
                                       std::to_string(files) + " files";
    std::set<Shape> positions;
    for (const FsdpFileCheck& c : checks) {
        if (!c.unroutable.empty()) return c.unroutable;
        if (!positions.insert(c.position).second)
            return "two files hold shard position " + shape_to_string(c.position) + " (replicas)";
    }
    return "";
}

ScannedFile fsdp_skeleton_scan(const ScannedFile& first) {
    ScannedFile skeleton;
    skeleton.path = first.path;
    skeleton.chunks = first.chunks;
    for (size_t i = 0; i < first.tensors.size(); ++i) {
        const StateDictEntry& e = first.tensors[i];
        StateDictEntry whole;
        whole.key = e.key;
        whole.chunk = e.chunk;
        whole.tensor.dtype = e.tensor.dtype;
        whole.tensor.shape = e.tensor.dtensor ? e.tensor.dtensor->global_shape : e.tensor.shape;
        whole.tensor.stride = contiguous_strides(whole.tensor.shape);
        whole.tensor.storage.file = first.path;
        whole.tensor.storage.key = e.tensor.storage.key;
        whole.tensor.storage.byte_offset = i;  // which key: never read (the shards are)
        whole.tensor.storage.byte_size = whole.tensor.nbytes();
        skeleton.tensors.push_back(std::move(whole));
    }
    return skeleton;
}

std::string skeleton_unroutable(const TensorMapping& skeleton, const ScannedFile& first) {
    if (!skeleton.lora_deltas.empty()) return "a LoRA merge";
    const size_t keys = first.tensors.size();
    for (const TensorRef& source : skeleton.sources) {
        if (source.storage.file != first.path || source.storage.byte_offset >= keys)
            return "a source outside the rank files (" + source.storage.file + ")";
        // The shards' boxes are in the key's global coordinates: a view into a key (one expert
        // of a fused [E, ...] tensor, a slice) would need its offset and strides composed in.
        const TensorRef& key = first.tensors[source.storage.byte_offset].tensor;
        const Shape& global = key.dtensor ? key.dtensor->global_shape : key.shape;
        if (source.shape != global || source.storage_offset != 0 || !source.is_contiguous())
            return "key '" + first.tensors[source.storage.byte_offset].key + "' is read as a view, not whole";
    }
    std::vector<int64_t> read(keys, 0);
    for (const OutputTensor& t : skeleton.tensors) {
        if (t.role != OutputTensor::Role::Plain || t.zero_fill || t.value_offset != 0 || t.lora_delta || t.adapter)
            return t.name + " is not a plain copy of its source";
        for (const BoxCopy& c : t.copies) {
            const TensorRef& source = skeleton.sources[c.source];
            if (c.src_start.size() != source.shape.size() || c.dst_start.size() != source.shape.size())
                return t.name + " changes its source's rank";
            read[skeleton_key(source)] += numel(c.extent);
        }
    }
    for (size_t i = 0; i < keys; ++i) {
        const TensorRef& t0 = first.tensors[i].tensor;
        const Shape& global = t0.dtensor ? t0.dtensor->global_shape : t0.shape;
        if (read[i] != numel(global)) return "key '" + first.tensors[i].key + "' is not read exactly once, whole";
    }
    return "";
}

}  // namespace vmerge
