#pragma once
#include <map>
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
};

// Every --backend value but auto, in auto-detection order: src/formats/registry.cpp's list, then
// the choices added at start-up (add_backend_choice).
const std::vector<BackendChoice>& backend_choices();

// Adds a --backend choice after the others, at start-up (a static initialiser, before main): a
// layout whose library vmerge_core does not link registers itself from that library, as the
// HDF5 target registers hdf5_archive. Error for a name already taken.
void add_backend_choice(BackendChoice choice);

// The layout entry named `name` (Backend::name: fsdp, torch_dist, ...); nullptr when none.
const Backend* find_layout(const std::string& name);

// "auto" and every choice's name, in order.
std::vector<std::string> backend_values();
bool is_backend_value(const std::string& value);
// "auto, fsdp, megatron, dcp or hdf5", for the usage error.
std::string backend_values_text();
// The --backend help: "auto | fsdp | ... | hdf5 (a model.h5 archive: ...)".
std::string backend_help();
// The usage error for `request` of the layouts of the choice it names (Backend::refuse), "" when
// none refuses; auto and unknown values: "".
std::string refuse_request(const CheckpointRequest& request);

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

// The detecting backend's reader of its mapped sources (Backend::source_opener); empty: files.
SourceOpener source_opener(const DetectedCheckpoint& ckpt);

// Whether the checkpoint is written as stored (Backend::as_stored), and the HF files it holds.
bool written_as_stored(const DetectedCheckpoint& ckpt);
std::map<std::string, std::string> checkpoint_hf_files(const DetectedCheckpoint& ckpt);

}  // namespace vmerge
