#include "vmerge/hf_config.h"

#include <fstream>

#include "vmerge/error.h"
#include "vmerge/json_file.h"

namespace vmerge {

HfConfig load_hf_config(const std::string& dir) {
    const std::string path = dir + "/config.json";
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot open the model config (pass --hf_config DIR)");
    HfConfig config;
    config.dir = dir;
    config.json = parse_json(in, path);
    if (!config.json.is_object()) throw Error(path + ": expected a JSON object");
    for (const char* key : {"dtype", "torch_dtype"}) {
        auto it = config.json.find(key);
        if (it != config.json.end() && it->is_string()) {
            config.dtype = dtype_from_torch_name(it->get<std::string>());
            if (!config.dtype)
                throw Error(path + ": unknown " + key + " '" + it->get<std::string>() + "'");
            break;
        }
    }
    auto tied = config.json.find("tie_word_embeddings");
    config.tie_word_embeddings = tied != config.json.end() && tied->is_boolean() && tied->get<bool>();
    auto arch = config.json.find("architectures");
    if (arch != config.json.end() && arch->is_array())
        for (const auto& a : *arch)
            if (a.is_string()) config.architectures.push_back(a.get<std::string>());
    return config;
}

}  // namespace vmerge
