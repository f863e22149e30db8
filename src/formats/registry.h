#pragma once
#include <optional>
#include <string>
#include <vector>

#include "formats/backend.h"

namespace vmerge {

// The --backend value that tries every auto-detected choice in list order.
inline constexpr const char* kAutoBackend = "auto";

// One --backend value and the layouts (Backend entries) it covers, tried in this order.
// Users name four kinds (fsdp, megatron, dcp, hdf5) while the code has one entry per layout:
// "megatron" covers verl's adapter checkpoint, torch_dist, the legacy per-rank files and
// HF safetensors already saved beside them, each a folder of its own under src/formats/.
struct BackendChoice {
    std::string name;     // the --backend value
    std::string help;     // --help text after the name; empty when the name says it
    std::string missing;  // the Error text after <local_dir> when this choice is forced and no layout matches
    std::vector<const Backend*> layouts;
    bool auto_detected = true;  // tried by --backend auto
    // A vmerge model.h5 archive: merged back and inspected by the archive commands, which
    // read it themselves (no detect, scan or map through this registry).
    bool archive = false;
};

// Every --backend value but auto, in auto-detection order (src/formats/registry.cpp).
const std::vector<BackendChoice>& backend_choices();

// The layout entry named `name` (Backend::name: fsdp, torch_dist, ...); nullptr when none.
const Backend* find_layout(const std::string& name);

// "auto" and every choice's name, in order.
std::vector<std::string> backend_values();
bool is_backend_value(const std::string& value);
// "auto, fsdp, megatron, dcp or hdf5", for the usage error.
std::string backend_values_text();
// The --backend help: "auto | fsdp | ... | hdf5 (a model.h5 archive: ...)".
std::string backend_help();
// True when `value` names an archive choice (BackendChoice::archive).
bool is_archive_backend(const std::string& value);

// Decides the layout of `local_dir` and discovers it (its files, what to scan): `backend`
// is auto (every auto-detected layout in list order) or a choice's name (its layouts in
// order). Nothing matching is an Error: the forced choice's `missing` text, or for auto the
// "cannot tell the checkpoint kind" message listing what every layout looked for.
// Before any backend looks, a verl run or step folder is followed to its role folder
// (resolve_checkpoint_level, with `level.step` and `level.role`); DetectedCheckpoint::dir and
// ::resolved say where it led. `flags`: the layout flags given (--iteration, --tag, ...), which
// the detecting layout reads; one it does not read is an Error.
struct LevelChoice {
    std::optional<int> step;
    std::string role;
};
DetectedCheckpoint detect_checkpoint(const std::string& local_dir, const std::string& backend,
                                     const LevelChoice& level = {}, const BackendFlags& flags = {});

// Every layout flag of the registry's layouts, once each, in registry order (the command line
// offers them); find_backend_flag: the one named `name` (no dashes), or nullptr.
const std::vector<const BackendFlag*>& backend_flags();
const BackendFlag* find_backend_flag(const std::string& name);

// Scans one of `ckpt.jobs` the way its backend reads it (the torch state-dict scan by default).
ScannedFile scan_job(const DetectedCheckpoint& ckpt, const ScanJob& job);

// The detecting backend's extra inspect facts (none for --simulate, which has no backend).
InspectFacts inspect_facts(const DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans);

}  // namespace vmerge
