#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/source_reader.h"
#include "formats/backend_flags.h"
#include "formats/checkpoint.h"

namespace vmerge {

// What detection knows before any backend looks: the folder, the folder config.json is
// taken from by default (<dir>/huggingface or hf_config_and_tokenizer), and the layouts' own
// flags as given (--iteration, --tag, ...; each layout reads those it lists in Backend::flags).
struct DetectRequest {
    std::string local_dir;
    std::string default_hf_dir;
    BackendFlags flags;
};

// A backend's answer to "does this folder look like mine": `evidence` says what it saw when
// it matched, and what it looked for and did not find when not (the "cannot tell" message
// lists every backend's).
struct Detection {
    bool found = false;
    std::string evidence;
};

// What `inspect` prints beyond the lines every checkpoint has.
struct InspectFacts {
    nlohmann::ordered_json shardings;  // sharding text -> keys ("sharding" lines); null: none
    bool parallelism_line = false;     // "parallelism  tp T, pp P, vpp V, ep E" from the facts
    // Lines of the backend's own (label, text: "compression", "zstd:3"), and the same facts for
    // --json under `json_key` (an archive's compression and storage).
    std::vector<std::pair<std::string, std::string>> lines;
    std::string json_key;
    nlohmann::ordered_json json;
};

// What a command asks of the checkpoint it will read, as the command line has it: the checks a
// layout makes before anything is read (Backend::refuse).
struct CheckpointRequest {
    std::string backend;         // the --backend value
    std::string command;         // merge | test | inspect | verify | watch
    std::string format;          // --format
    std::string folder_format;   // the output format that writes a Hugging Face folder (the default)
    std::string dtype;           // --dtype as given (auto, keep, bf16, ...)
    bool quantize = false;       // --quantize
    std::vector<std::string> given;  // every flag given on the command line, without dashes
};

// One checkpoint layout: a folder under src/formats/ defines one of these and
// src/formats/registry.cpp lists it. Detection, mapping and inspect reach a backend only
// through this interface, so the CLI and the driver name none.
class Backend {
public:
    virtual ~Backend() = default;
    // The layout's own name (megatron_legacy, torch_dist, ...), for people and tests.
    virtual std::string name() const = 0;
    // Looks at request.local_dir; when the folder is this layout, discovers it: fills
    // `d` (description, weights_dir, notes, scan jobs and the layout's own data).
    virtual Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const = 0;
    // The backend's rules: the scans (`scans[i]` of `d.jobs[i]`) as output tensors made of
    // box copies, into `m.mapping`; its facts and notes into `m`; what it does not use is
    // dropped in `ledger` with its reason.
    // Reads `d` only: what detection found is the same before and after mapping.
    virtual void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
                     const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) const = 0;
    // The flags of this layout's own that it reads (backend_flags.h); any other layout flag
    // given is refused after detection (docs/usage.md: never ignored).
    virtual std::vector<const BackendFlag*> flags() const { return {}; }
    // True when the checkpoint records its tensor/pipeline-parallel sizes (--tp_size and
    // --pp_size are checked against them).
    virtual bool records_parallelism() const { return false; }
    // True when the checkpoint names its own tensors (FSDP, plain DCP): the output is checked
    // against config.json after the output rules (check_output_against_config).
    virtual bool names_own_tensors() const { return false; }
    virtual InspectFacts inspect_facts(const DetectedCheckpoint&, const std::vector<ScannedFile>&) const { return {}; }
    // Reads one of `d.jobs` (its data.pkl, not its tensor bytes); default: the torch.save state-dict scan.
    virtual ScannedFile scan(const ScanJob& job) const;
    // How the copy executor reads the sources `map` made, when they are not files read with pread
    // (the datasets of an HDF5 archive); empty: files. `d` must outlive what it opens.
    virtual SourceOpener source_opener(const DetectedCheckpoint& /*d*/) const { return {}; }
    // True when the checkpoint is a merge's output already (a vmerge archive): its tensors are the
    // output as `map` gives them, written as stored, with its own HF files (`hf_files`); no
    // config.json is read, no output rule, LoRA or quantization applies, and nothing is resumed.
    virtual bool as_stored() const { return false; }
    // The HF files (config, tokenizer, ...) the checkpoint holds itself, by relative path, written
    // into the output as they are (an as_stored checkpoint's). Read by rank 0 for the commit.
    virtual std::map<std::string, std::string> hf_files(const DetectedCheckpoint& /*d*/) const { return {}; }
    // Why this layout cannot serve `request` ("" when it can): the command line's usage error
    // before anything is read (an archive converts back into a Hugging Face folder only).
    virtual std::string refuse(const CheckpointRequest& /*request*/) const { return ""; }
};

}  // namespace vmerge
