#include "plan/output_layout.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "safetensors/safetensors_file.h"

namespace vmerge {

std::string safetensors_header(const std::vector<const OutputTensor*>& tensors, const std::string& file) {
    // Built by hand to keep the safetensors writer's order: __metadata__ first, then the
    // tensors in offset order (nlohmann's object would sort the keys).
    std::string json = R"({"__metadata__":{"format":"pt"})";
    uint64_t offset = 0;
    SafetensorsHeaderCheck check(file);
    for (const OutputTensor* t : tensors) {
        check.add(t->name, t->dtype, t->shape, t->nbytes());
        json += "," + nlohmann::json(t->name).dump() + ":{\"dtype\":\"" +
                std::string(safetensors_name(t->dtype)) + "\",\"shape\":[";
        for (size_t d = 0; d < t->shape.size(); ++d)
            json += (d ? "," : "") + std::to_string(t->shape[d]);
        const uint64_t end = offset + t->nbytes();
        json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
        offset = end;
    }
    json += "}";
    json.append((8 - json.size() % 8) % 8, ' ');
    if (json.size() > 100'000'000)
        throw Error("safetensors header of " + std::to_string(json.size()) +
                    " bytes exceeds the 100,000,000-byte limit readers accept; lower --max-shard-size");
    std::string header(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
    return header + json;
}

namespace {

OutputFile plan_file(const std::vector<OutputTensor>& tensors, std::string name, std::vector<size_t> members) {
    OutputFile file;
    file.name = std::move(name);
    file.tensors = std::move(members);
    std::stable_sort(file.tensors.begin(), file.tensors.end(), [&](size_t a, size_t b) {
        const size_t ea = element_size(tensors[a].dtype), eb = element_size(tensors[b].dtype);
        if (ea != eb) return ea > eb;
        return tensors[a].name < tensors[b].name;
    });
    std::vector<const OutputTensor*> ordered;
    for (size_t i : file.tensors) ordered.push_back(&tensors[i]);
    file.header = safetensors_header(ordered, file.name);
    return file;
}

}  // namespace

OutputLayout plan_output_layout(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size) {
    OutputLayout layout;
    std::vector<std::vector<size_t>> groups;
    std::vector<size_t> adapter;
    uint64_t current = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t bytes = tensors[i].nbytes();
        layout.total_size += bytes;
        if (tensors[i].adapter) {
            adapter.push_back(i);
            continue;
        }
        if (groups.empty() || (current > 0 && current + bytes > max_shard_size)) {
            groups.emplace_back();
            current = 0;
        }
        groups.back().push_back(i);
        current += bytes;
    }
    if (groups.empty()) groups.emplace_back();
    for (size_t g = 0; g < groups.size(); ++g) {
        std::string name = "model.safetensors";
        if (groups.size() > 1) {
            char buffer[64];
            std::snprintf(buffer, sizeof buffer, "model-%05zu-of-%05zu.safetensors", g + 1, groups.size());
            name = buffer;
        }
        layout.files.push_back(plan_file(tensors, name, groups[g]));
    }
    layout.model_files = layout.files.size();
    if (!adapter.empty()) layout.files.push_back(plan_file(tensors, kAdapterWeightsFile, adapter));
    layout.locations.resize(tensors.size());
    for (size_t f = 0; f < layout.files.size(); ++f) {
        OutputFile& file = layout.files[f];
        uint64_t offset = file.header.size();
        for (size_t i : file.tensors) {
            layout.locations[i] = {f, offset};
            offset += tensors[i].nbytes();
        }
        file.size = offset;
    }
    return layout;
}

std::string index_json(const std::vector<OutputTensor>& tensors, const OutputLayout& layout) {
    nlohmann::json index;
    uint64_t parameters = 0, bytes = 0;
    index["weight_map"] = nlohmann::json::object();
    for (size_t i = 0; i < tensors.size(); ++i) {
        if (tensors[i].adapter) continue;
        parameters += static_cast<uint64_t>(numel(tensors[i].shape));
        bytes += tensors[i].nbytes();
        index["weight_map"][tensors[i].name] = layout.files[layout.locations[i].file].name;
    }
    index["metadata"] = {{"total_size", bytes}, {"total_parameters", parameters}};
    return index.dump(2) + "\n";
}

}  // namespace vmerge
