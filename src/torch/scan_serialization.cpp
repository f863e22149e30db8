#include "torch/scan_serialization.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace vmerge {
namespace {

using nlohmann::json;

json placement_json(const Placement& p) {
    return {static_cast<int>(p.kind), p.dim, p.split_factor, p.reduce_op};
}

Placement placement_from(const json& j) {
    Placement p;
    p.kind = static_cast<Placement::Kind>(j.at(0).get<int>());
    p.dim = j.at(1).get<int64_t>();
    p.split_factor = j.at(2).get<int64_t>();
    p.reduce_op = j.at(3).get<std::string>();
    return p;
}

json scan_to_json(const ScannedFile& scanned) {
    json tensors = json::array();
    for (const auto& e : scanned.tensors) {
        const TensorRef& t = e.tensor;
        json j = {{"k", e.key}, {"d", static_cast<int>(t.dtype)}, {"s", t.shape}, {"st", t.stride},
                  {"o", t.storage_offset}, {"f", t.storage.file}, {"r", t.storage.key},
                  {"b", t.storage.byte_offset}, {"n", t.storage.byte_size}, {"c", e.chunk}};
        if (t.storage.crc32) j["crc"] = *t.storage.crc32;
        if (t.dtensor) {
            json placements = json::array();
            for (const auto& p : t.dtensor->placements) placements.push_back(placement_json(p));
            j["dt"] = {{"g", t.dtensor->global_shape}, {"m", t.dtensor->mesh_shape},
                       {"names", t.dtensor->mesh_dim_names}, {"c", t.dtensor->coordinates},
                       {"p", placements}};
        }
        tensors.push_back(std::move(j));
    }
    json skipped = json::array();
    for (const auto& s : scanned.skipped) skipped.push_back(json::array({s.key, s.kind}));
    json j{{"path", scanned.path}, {"tensors", tensors}, {"skipped", skipped}, {"chunks", scanned.chunks}};
    if (!scanned.metadata.empty()) j["m"] = scanned.metadata;
    return j;
}

ScannedFile scan_from_json(const json& j) {
    ScannedFile scanned;
    scanned.path = j.at("path").get<std::string>();
    for (const auto& s : j.at("skipped")) scanned.skipped.push_back({s.at(0).get<std::string>(), s.at(1).get<std::string>()});
    scanned.chunks = j.at("chunks").get<int>();
    if (j.contains("m")) scanned.metadata = j.at("m").get<std::string>();
    for (const auto& e : j.at("tensors")) {
        StateDictEntry entry;
        entry.key = e.at("k").get<std::string>();
        entry.chunk = e.at("c").get<int>();
        TensorRef& t = entry.tensor;
        t.dtype = static_cast<DType>(e.at("d").get<int>());
        t.shape = e.at("s").get<Shape>();
        t.stride = e.at("st").get<Shape>();
        t.storage_offset = e.at("o").get<int64_t>();
        t.storage = {e.at("f").get<std::string>(), e.at("r").get<std::string>(),
                     e.at("b").get<uint64_t>(), e.at("n").get<uint64_t>(), std::nullopt};
        if (e.contains("crc")) t.storage.crc32 = e.at("crc").get<uint32_t>();
        if (e.contains("dt")) {
            const json& d = e.at("dt");
            DTensorLayout layout;
            layout.global_shape = d.at("g").get<Shape>();
            layout.mesh_shape = d.at("m").get<Shape>();
            layout.mesh_dim_names = d.at("names").get<std::vector<std::string>>();
            layout.coordinates = d.at("c").get<Shape>();
            for (const auto& p : d.at("p")) layout.placements.push_back(placement_from(p));
            t.dtensor = std::move(layout);
        }
        scanned.tensors.push_back(std::move(entry));
    }
    return scanned;
}

template <typename Parse>
auto parse_message(const std::string& text, Parse parse) {
    try {
        return parse(json::parse(text));
    } catch (const json::exception& e) {
        throw Error(std::string("internal: malformed scan message: ") + e.what());
    }
}

}  // namespace

std::string serialize_scan(const ScannedFile& scanned) { return scan_to_json(scanned).dump(); }

ScannedFile deserialize_scan(const std::string& text) {
    return parse_message(text, [](const json& j) { return scan_from_json(j); });
}

std::string serialize_scans(const std::vector<ScannedFile>& scans) {
    json list = json::array();
    for (const auto& s : scans) list.push_back(scan_to_json(s));
    return list.dump();
}

std::vector<ScannedFile> deserialize_scans(const std::string& text) {
    return parse_message(text, [](const json& list) {
        std::vector<ScannedFile> scans;
        for (const auto& j : list) scans.push_back(scan_from_json(j));
        return scans;
    });
}

std::vector<ScannedFile> gathered_scans(std::vector<std::string>& messages, size_t files) {
    std::vector<ScannedFile> scans(files);
    const size_t ranks = messages.size();
    for (size_t r = 0; r < ranks; ++r) {
        auto list = deserialize_scans(messages[r]);
        std::string().swap(messages[r]);
        if (list.size() != (files > r ? (files - r + ranks - 1) / ranks : 0))
            throw Error("internal: malformed scan message: rank " + std::to_string(r) + " sent " +
                        std::to_string(list.size()) + " scans of the " + std::to_string(files) + " files");
        for (size_t k = 0; k < list.size(); ++k) scans[r + k * ranks] = std::move(list[k]);
    }
    return scans;
}

}  // namespace vmerge
