#include "output/safetensors/safetensors_layout.h"

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

FileFormat safetensors_file_format() {
    FileFormat format;
    format.model_file_name = [](size_t shard, size_t shards) {
        if (shards == 1) return std::string("model.safetensors");
        char buffer[64];
        std::snprintf(buffer, sizeof buffer, "model-%05zu-of-%05zu.safetensors", shard + 1, shards);
        return std::string(buffer);
    };
    format.adapter_file = kAdapterWeightsFile;
    format.header = [](const std::vector<const OutputTensor*>& tensors, const std::string& file) {
        return safetensors_header(tensors, file);
    };
    return format;
}

OutputLayout plan_safetensors_layout(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size) {
    return plan_output_layout(tensors, max_shard_size, safetensors_file_format());
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
