#include "safetensors/safetensors_file.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/contained_path.h"
#include "io/json_file.h"
#include "io/input_file.h"
#include "io/input_tree.h"

namespace vmerge {
namespace fs = std::filesystem;

uint64_t SafetensorsHeaderCheck::add(const std::string& name, DType dtype, const Shape& shape, uint64_t nbytes) {
    const std::string where = file_ + ": safetensors header: tensor '" + name + "'";
    if (name == "__metadata__")
        throw Error(where + ": the name is reserved for the header's metadata map; a state-dict key '__metadata__' "
                            "cannot be written as a tensor");
    if (!names_.insert(name).second)
        throw Error(where + " is planned twice (two source tensors map to one name; the header would keep one)");
    const auto count = checked_numel(shape);
    uint64_t bytes = 0;
    if (!count || __builtin_mul_overflow(static_cast<uint64_t>(*count), element_size(dtype), &bytes))
        throw Error(where + ": shape " + shape_to_string(shape) + " of " + std::string(safetensors_name(dtype)) +
                    " has more than 2^63 elements or 2^64 bytes");
    if (bytes != nbytes)
        throw Error(where + ": shape " + shape_to_string(shape) + " of " + std::string(safetensors_name(dtype)) +
                    " needs " + std::to_string(bytes) + " bytes, but " + std::to_string(nbytes) + " are planned");
    if (__builtin_add_overflow(end_, bytes, &end_))
        throw Error(where + ": the data offsets pass 2^64 bytes");
    return end_;
}

SafetensorsFile read_safetensors_header(const std::string& path) {
    InputFile file(path);
    SafetensorsFile out;
    out.path = path;
    if (file.size() < 8) throw Error(path + ": " + std::to_string(file.size()) + " bytes, too small for a safetensors header");
    unsigned char length_bytes[8];
    file.read_exact(0, length_bytes, 8, "safetensors header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | length_bytes[i];
    if (n > 100'000'000) throw Error(path + ": header length " + std::to_string(n) + " exceeds 100,000,000");
    if (8 + n > file.size())
        throw Error(path + ": header length " + std::to_string(n) + " runs past the end of the " +
                    std::to_string(file.size()) + "-byte file");
    std::string text(n, '\0');
    file.read_exact(8, text.data(), n, "safetensors header");
    out.data_start = 8 + n;
    if (text.empty() || text[0] != '{') throw Error(path + ": header does not start with '{'");
    if (n % 8 != 0) out.convention_warnings.push_back("header length " + std::to_string(n) + " is not a multiple of 8");
    nlohmann::ordered_json json;
    // JSON keeps one of two equal keys; a header naming a tensor twice is refused instead.
    std::set<std::string> keys;
    std::string duplicate;
    const auto note_key = [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
        if (event == nlohmann::ordered_json::parse_event_t::key && depth == 1 && duplicate.empty() &&
            !keys.insert(parsed.get<std::string>()).second)
            duplicate = parsed.get<std::string>();
        return true;
    };
    try {
        json = nlohmann::ordered_json::parse(text, note_key);
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": header is not valid JSON: " + e.what());
    }
    if (!duplicate.empty()) throw Error(path + ": header names '" + duplicate + "' twice");
    if (!json.is_object()) throw Error(path + ": header is not a JSON object");
    for (auto it = json.begin(); it != json.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it->is_object()) throw Error(path + ": __metadata__ is not an object");
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string()) throw Error(path + ": __metadata__ value '" + m.key() + "' is not a string");
                out.metadata[m.key()] = m->get<std::string>();
            }
            continue;
        }
        const auto& v = *it;
        const std::string where = path + ": tensor '" + it.key() + "'";
        if (!v.is_object() || v.size() != 3 || !v.contains("dtype") || !v.contains("shape") ||
            !v.contains("data_offsets"))
            throw Error(where + ": entry must have exactly dtype, shape and data_offsets");
        SafetensorsEntry e;
        e.name = it.key();
        auto dtype = v["dtype"].is_string() ? dtype_from_safetensors(v["dtype"].get<std::string>()) : std::nullopt;
        if (!dtype) throw Error(where + ": unknown dtype " + v["dtype"].dump());
        e.dtype = *dtype;
        if (!v["shape"].is_array()) throw Error(where + ": shape is not an array");
        int64_t count = 1;
        for (const auto& d : v["shape"]) {
            if (!d.is_number_unsigned()) throw Error(where + ": shape holds " + d.dump());
            const uint64_t size = d.get<uint64_t>();
            if (size > static_cast<uint64_t>(INT64_MAX) ||
                __builtin_mul_overflow(count, static_cast<int64_t>(size), &count))
                throw Error(where + ": shape " + v["shape"].dump() + " has more than 2^63 elements");
            e.shape.push_back(static_cast<int64_t>(size));
        }
        uint64_t nbytes = 0;
        if (__builtin_mul_overflow(static_cast<uint64_t>(count), element_size(e.dtype), &nbytes))
            throw Error(where + ": shape " + v["shape"].dump() + " needs more than 2^64 bytes");
        const auto& offsets = v["data_offsets"];
        if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
            !offsets[1].is_number_unsigned())
            throw Error(where + ": data_offsets must be two unsigned integers");
        e.begin = offsets[0].get<uint64_t>();
        e.end = offsets[1].get<uint64_t>();
        if (e.end < e.begin) throw Error(where + ": data_offsets end before begin");
        if (e.end - e.begin != nbytes)
            throw Error(where + ": " + std::to_string(e.end - e.begin) + " bytes for shape " +
                        shape_to_string(e.shape));
        out.entries.push_back(e);
    }
    std::sort(out.entries.begin(), out.entries.end(), [](const auto& a, const auto& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t expected = 0;
    for (auto& e : out.entries) {
        if (e.begin != expected)
            throw Error(path + ": tensor '" + e.name + "' starts at data offset " + std::to_string(e.begin) +
                        ", expected " + std::to_string(expected) + " (hole or overlap)");
        expected = e.end;
        e.begin += out.data_start;
        e.end += out.data_start;
    }
    if (out.data_start + expected != file.size())
        throw Error(path + ": data ends at byte " + std::to_string(out.data_start + expected) +
                    " but the file has " + std::to_string(file.size()));
    return out;
}

HfWeights read_hf_weights(const std::string& dir) {
    HfWeights weights;
    const std::string index_path = dir + "/model.safetensors.index.json";
    std::vector<std::string> names;
    nlohmann::json index;
    const bool has_index = path_exists(index_path);
    if (has_index) {
        index = read_json_file(index_path);
        if (!index.contains("weight_map") || !index["weight_map"].is_object())
            throw Error(index_path + ": no weight_map object");
        if (!index.contains("metadata") || !index["metadata"].is_object())
            throw Error(index_path + ": no metadata object");
        std::set<std::string> files;
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
            if (!it->is_string())
                throw Error(index_path + ": weight_map['" + it.key() + "'] is " + it->type_name() + ", expected a file name");
            files.insert(it->get<std::string>());
        }
        names.assign(files.begin(), files.end());
    } else if (path_exists(dir + "/model.safetensors")) {
        names.push_back("model.safetensors");
    } else {
        throw Error(dir + ": neither model.safetensors nor model.safetensors.index.json");
    }
    uint64_t total = 0;
    for (const auto& name : names) {
        weights.files.push_back(read_safetensors_header(path_inside(dir, name, index_path + " weight_map")));
        const size_t f = weights.files.size() - 1;
        for (size_t e = 0; e < weights.files[f].entries.size(); ++e) {
            const auto& entry = weights.files[f].entries[e];
            total += entry.end - entry.begin;
            if (!weights.by_name.emplace(entry.name, std::make_pair(f, e)).second)
                throw Error(dir + "/" + name + ": tensor '" + entry.name + "' is also in another file");
            if (has_index) {
                auto mapped = index["weight_map"].find(entry.name);
                if (mapped == index["weight_map"].end())
                    throw Error(index_path + ": weight_map lacks '" + entry.name + "' of " + name);
                if (mapped->get<std::string>() != name)
                    throw Error(index_path + ": weight_map puts '" + entry.name + "' in " +
                                mapped->get<std::string>() + " but it is in " + name);
            }
        }
    }
    if (has_index) {
        for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it)
            if (!weights.by_name.count(it.key()))
                throw Error(index_path + ": weight_map lists '" + it.key() + "' which no file holds");
        const auto& meta = index["metadata"];
        if (meta.contains("total_size") && meta["total_size"].is_number() &&
            meta["total_size"].get<uint64_t>() != total)
            throw Error(index_path + ": metadata.total_size " + meta["total_size"].dump() +
                        " but the tensors hold " + std::to_string(total) + " bytes");
    }
    return weights;
}

}  // namespace vmerge
