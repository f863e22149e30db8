// The C interface (include/vmerge/vmerge.h) over the C++ one: JSON options in, an opaque result
// out, no exception or C++ type across the boundary.
#include <new>
#include <string>

#include <nlohmann/json.hpp>

#include "vmerge/vmerge.h"
#include "vmerge/vmerge.hpp"

struct vmerge_result {
    int exit_code = 0;
    std::string error;
    std::string json = "{}";
    std::string output;
};

namespace {

using vmerge::api::MergeError;

// {"local_dir": "ckpt", "resume": true, "quantize_ignore": ["lm_head", "..."]} as the C++ options.
vmerge::api::Options options_of(const char* text) {
    const auto usage = [](const std::string& what) {
        return MergeError("vmerge-mpi: usage error: options " + what + " (see --help)", 2);
    };
    nlohmann::json object;
    try {
        object = nlohmann::json::parse(text ? text : "{}");
    } catch (const nlohmann::json::exception& e) {
        throw usage("JSON: " + std::string(e.what()));
    }
    if (!object.is_object()) throw usage("JSON: expected an object of flags by name, not " + std::string(object.type_name()));
    vmerge::api::Options options;
    const auto add = [&](const std::string& name, const nlohmann::json& value) {
        if (value.is_string()) options.emplace_back(name, value.get<std::string>());
        else if (value.is_boolean()) options.emplace_back(name, value.get<bool>() ? "true" : "false");
        else if (value.is_number()) options.emplace_back(name, value.dump());
        else throw usage("JSON: \"" + name + "\": expected a string, number, boolean or a list of them, not " +
                         std::string(value.type_name()));
    };
    for (const auto& [name, value] : object.items()) {
        if (value.is_null()) continue;
        if (!value.is_array()) add(name, value);
        else
            for (const auto& element : value) add(name, element);
    }
    return options;
}

}  // namespace

extern "C" {

int vmerge_run(const char* command, const char* options_json, vmerge_progress_fn progress, void* user,
               vmerge_result** result) {
    vmerge_result* r = new (std::nothrow) vmerge_result;
    if (result) *result = r;
    if (!r) return 1;
    try {
        vmerge::api::ProgressCallback callback;
        if (progress)
            callback = [progress, user](uint64_t done, uint64_t total) { return progress(done, total, user) == 0; };
        const vmerge::api::Result run = vmerge::api::run(command ? command : "", options_of(options_json), callback);
        r->exit_code = run.exit_code;
        r->json = run.json;
        r->output = run.output;
    } catch (const MergeError& e) {
        r->exit_code = e.exit_code();
        r->error = e.what();
    } catch (const std::exception& e) {
        r->exit_code = 1;
        r->error = std::string("vmerge-mpi: error: ") + e.what();
    } catch (...) {
        r->exit_code = 1;
        r->error = "vmerge-mpi: error: unknown exception";
    }
    const int code = r->exit_code;
    if (!result) delete r;
    return code;
}

int vmerge_result_exit_code(const vmerge_result* r) { return r ? r->exit_code : 1; }
const char* vmerge_result_error(const vmerge_result* r) { return r ? r->error.c_str() : "out of memory"; }
const char* vmerge_result_json(const vmerge_result* r) { return r ? r->json.c_str() : "{}"; }
const char* vmerge_result_output(const vmerge_result* r) { return r ? r->output.c_str() : ""; }
void vmerge_result_free(vmerge_result* r) { delete r; }
const char* vmerge_version(void) { return vmerge::api::version(); }
int vmerge_c_api_version(void) { return VMERGE_C_API_VERSION; }

}  // extern "C"
