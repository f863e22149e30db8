#include "formats/verl_v2/verl_manifest.h"

#include <filesystem>

#include "core/error.h"
#include "io/json_file.h"

namespace vmerge {
namespace {

std::string text_field(const nlohmann::json& entry, const char* key, const std::string& where) {
    const auto it = entry.find(key);
    if (it == entry.end() || !it->is_string()) throw Error(where + ": '" + key + "' is missing or not a string");
    return it->get<std::string>();
}

// A path inside the role folder: the manifest's paths are relative to it by design.
std::string relative_path(const nlohmann::json& entry, const char* key, const std::string& where) {
    const std::string path = text_field(entry, key, where);
    const std::filesystem::path p(path);
    bool leaves = p.is_absolute() || path.empty();
    for (const auto& part : p) leaves = leaves || part == "..";
    if (leaves) throw Error(where + ": '" + key + "' " + path + ": expected a path inside the checkpoint folder");
    return path;
}

std::optional<VerlManifestEntry> entry_of(const nlohmann::json& contents, const char* name, const std::string& where) {
    const auto it = contents.find(name);
    if (it == contents.end()) return std::nullopt;
    const std::string at = where + " contents." + name;
    if (!it->is_object()) throw Error(at + ": expected an object");
    VerlManifestEntry e;
    e.path = relative_path(*it, "path", at);
    e.format = text_field(*it, "format", at);
    if (it->contains("peft_adapter_path")) e.peft_adapter_path = relative_path(*it, "peft_adapter_path", at);
    return e;
}

bool flag_of(const nlohmann::json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
}

}  // namespace

VerlManifest parse_verl_manifest(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    VerlManifest m;
    if (!j.contains("schema_version")) throw Error(where + ": 'schema_version' is missing");
    m.schema_version = static_cast<int>(json_int_within(j["schema_version"], 0, 1000, where + " schema_version"));
    if (j.contains("role") && j["role"].is_string()) m.role = j["role"].get<std::string>();
    if (j.contains("backend") && j["backend"].is_object()) {
        m.use_dist_checkpointing = flag_of(j["backend"], "use_dist_checkpointing");
        m.peft = flag_of(j["backend"], "peft");
    }
    const auto contents = j.find("contents");
    if (contents == j.end() || !contents->is_object()) throw Error(where + ": 'contents' is missing or not an object");
    m.model = entry_of(*contents, "model", where);
    m.hf_config = entry_of(*contents, "hf_config", where);
    m.tokenizer = entry_of(*contents, "tokenizer", where);
    m.peft_adapters = entry_of(*contents, "peft_adapters", where);
    if (m.model && m.model->format != kVerlDistFormat && m.model->format != kVerlHfFormat)
        throw Error(where + " contents.model: format '" + m.model->format + "': expected " + kVerlDistFormat + " or " +
                    kVerlHfFormat);
    return m;
}

}  // namespace vmerge
