#include "formats/registry.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/input_tree.h"
#include "io/input_folder.h"
#include "formats/checkpoint_level.h"
#include "io/input_file.h"
#include "torch/torch_pickle.h"

namespace vmerge {
namespace fs = std::filesystem;

// Each backend's folder defines its entry (src/formats/<name>/*_layout.cpp).
const Backend& fsdp_backend();
const Backend& verl_v2_backend();
const Backend& megatron_adapter_backend();
const Backend& torch_dist_backend();
const Backend& megatron_legacy_backend();
const Backend& hf_safetensors_backend();
const Backend& dcp_backend();
const Backend& torchtitan_backend();
const Backend& deepspeed_backend();

namespace {

std::vector<BackendChoice>& choice_list() {
    // The order is the auto-detection order, and within "megatron" the order its layouts
    // are tried: verl's layout v2 (ckpt_contents.json, model/) first, as its model/ subfolder
    // decides what is read; an adapter_checkpoint/ next (it sits beside the model files), torch_dist
    // before legacy files, and HF safetensors only when no Megatron weights are there.
    static std::vector<BackendChoice> choices{
        {"fsdp", "", ": no model_world_size_*_rank_*.pt files (--backend fsdp)", {&fsdp_backend()}},
        {"megatron", "",
         ": no Megatron checkpoint (no mp_rank_* folders, no dist_ckpt/ or metadata.json, "
         "no latest_checkpointed_iteration.txt)",
         {&verl_v2_backend(), &megatron_adapter_backend(), &torch_dist_backend(), &megatron_legacy_backend(),
          &hf_safetensors_backend()}},
        {"torchtitan", "", ": no torchtitan step (step-N/.metadata with tok_embeddings.weight or layers.N.* keys)",
         {&torchtitan_backend()}},
        {"dcp", "", "/.metadata: missing (--backend dcp needs a torch.distributed.checkpoint folder)", {&dcp_backend()}},
        {"deepspeed", "DeepSpeed ZeRO 1/2/3: a folder with latest, or its tag folder",
         ": no DeepSpeed checkpoint (no latest file, no *_optim_states.pt)", {&deepspeed_backend()}},
    };
    return choices;
}

}  // namespace

const std::vector<BackendChoice>& backend_choices() { return choice_list(); }

void add_backend_choice(BackendChoice choice) {
    if (choice.name == kAutoBackend || is_backend_value(choice.name))
        throw Error("internal: two --backend choices named " + choice.name);
    choice_list().push_back(std::move(choice));
}

const Backend* find_layout(const std::string& name) {
    for (const auto& choice : backend_choices())
        for (const Backend* layout : choice.layouts)
            if (layout->name() == name) return layout;
    return nullptr;
}

std::vector<std::string> backend_values() {
    std::vector<std::string> values{kAutoBackend};
    for (const auto& choice : backend_choices()) values.push_back(choice.name);
    return values;
}

bool is_backend_value(const std::string& value) {
    for (const auto& v : backend_values())
        if (v == value) return true;
    return false;
}

std::string backend_values_text() {
    const auto values = backend_values();
    std::string text;
    for (size_t i = 0; i < values.size(); ++i)
        text += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
    return text;
}

std::string backend_help() {
    std::string text = kAutoBackend;
    for (const auto& choice : backend_choices())
        text += " | " + choice.name + (choice.help.empty() ? "" : " (" + choice.help + ")");
    return text;
}

std::string refuse_request(const CheckpointRequest& request) {
    for (const auto& choice : backend_choices()) {
        if (choice.name != request.backend) continue;
        for (const Backend* layout : choice.layouts)
            if (std::string why = layout->refuse(request); !why.empty()) return why;
    }
    return "";
}

namespace {

std::string default_hf_dir(const std::string& dir) {
    for (const char* name : {"huggingface", "hf_config_and_tokenizer"})
        if (path_exists(join_path(join_path(dir, name), "config.json"))) return join_path(dir, name);
    return join_path(dir, "huggingface");
}

}  // namespace

namespace {

// A layout flag the detected layout does not read is an error, never ignored: the user asked
// for one step (or a base model, ...) and would silently get something else.
void refuse_flags_not_read(const BackendFlags& given, const Backend& layout, const DetectedCheckpoint& d) {
    const auto read = layout.flags();
    for (const auto& [name, value] : given.values()) {
        const bool reads = std::any_of(read.begin(), read.end(), [&](const BackendFlag* f) { return f->name == name; });
        if (reads) continue;
        const BackendFlag* flag = find_backend_flag(name);
        const std::string typed = "--" + name + (flag && flag->kind == BackendFlag::Kind::Switch ? "" : " " + value);
        throw Error(typed + ": " + d.dir + " was read as " + d.description + " (" + layout.name() + "), which " +
                    (flag ? flag->refusal : "does not read it"));
    }
}

}  // namespace

const std::vector<const BackendFlag*>& backend_flags() {
    static const std::vector<const BackendFlag*> flags = [] {
        std::vector<const BackendFlag*> unique;
        for (const auto& choice : backend_choices())
            for (const Backend* layout : choice.layouts)
                for (const BackendFlag* flag : layout->flags()) {
                    const auto same = std::find_if(unique.begin(), unique.end(),
                                                   [&](const BackendFlag* f) { return f->name == flag->name; });
                    // Two layouts reading one flag share its definition (backend_flags.h).
                    if (same != unique.end() && *same != flag)
                        throw Error("internal: two definitions of the layout flag --" + flag->name);
                    if (same == unique.end()) unique.push_back(flag);
                }
        return unique;
    }();
    return flags;
}

const BackendFlag* find_backend_flag(const std::string& name) {
    for (const BackendFlag* flag : backend_flags())
        if (flag->name == name) return flag;
    return nullptr;
}

DetectedCheckpoint detect_checkpoint(const std::string& given_dir, const std::string& backend, const LevelChoice& choice,
                                     const BackendFlags& given) {
    require_input_folder(given_dir, "--local_dir: the checkpoint folder");
    // verl numbers a run's saves in latest_checkpointed_iteration.txt, as Megatron-LM does: on a
    // verl run folder --iteration N is --step N.
    LevelChoice levels = choice;
    BackendFlags flags = given;
    const std::optional<int> iteration = flags.count("iteration");
    if (iteration && is_run_folder(list_folder(given_dir))) {
        if (levels.step && *levels.step != *iteration)
            throw Error("--step " + std::to_string(*levels.step) + " and --iteration " + std::to_string(*iteration) +
                        " name two steps of the verl run folder " + given_dir + "; give one");
        levels.step = iteration;
        flags.erase("iteration");
    }
    const CheckpointLevel level = resolve_checkpoint_level(given_dir, levels.step, levels.role, list_folder);
    const std::string& local_dir = level.dir;
    const DetectRequest request{local_dir, default_hf_dir(local_dir), flags};
    const bool automatic = backend == kAutoBackend;
    std::string evidence;  // "fsdp: no ...; megatron: no ..., no ...; ..."
    for (const BackendChoice& choice : backend_choices()) {
        if (automatic ? !choice.auto_detected : choice.name != backend) continue;
        std::string seen;
        for (const Backend* layout : choice.layouts) {
            DetectedCheckpoint d;
            d.default_hf_dir = request.default_hf_dir;
            d.dir = level.dir;
            d.resolved = level.steps;
            const Detection detection = layout->detect(request, d);
            if (detection.found) {
                d.source = layout;
                d.backend = choice.name;
                d.flags = flags;
                refuse_flags_not_read(flags, *layout, d);
                return d;
            }
            seen += (seen.empty() ? "" : ", ") + detection.evidence;
        }
        if (!automatic) throw Error(local_dir + choice.missing);
        evidence += (evidence.empty() ? "" : "; ") + choice.name + ": " + seen;
    }
    if (!automatic) throw Error("--backend " + backend + ": expected " + backend_values_text());
    std::string names;
    for (const BackendChoice& choice : backend_choices()) names += (names.empty() ? "" : ", ") + choice.name;
    throw Error(local_dir + ": cannot tell the checkpoint kind: " + evidence + "; pass --backend to name it (" + names + ")");
}

ScannedFile Backend::scan(const ScanJob& job) const {
    const InputFile file(job.path);
    return scan_torch_archive(file, job.base, job.length);
}

ScannedFile scan_job(const DetectedCheckpoint& ckpt, const ScanJob& job) {
    if (ckpt.source) return ckpt.source->scan(job);
    const InputFile file(job.path);
    return scan_torch_archive(file, job.base, job.length);
}

InspectFacts inspect_facts(const DetectedCheckpoint& ckpt, const std::vector<ScannedFile>& scans) {
    return ckpt.source ? ckpt.source->inspect_facts(ckpt, scans) : InspectFacts{};
}

SourceOpener source_opener(const DetectedCheckpoint& ckpt) {
    return ckpt.source ? ckpt.source->source_opener(ckpt) : SourceOpener{};
}

bool written_as_stored(const DetectedCheckpoint& ckpt) { return ckpt.source && ckpt.source->as_stored(); }

std::map<std::string, std::string> checkpoint_hf_files(const DetectedCheckpoint& ckpt) {
    return ckpt.source ? ckpt.source->hf_files(ckpt) : std::map<std::string, std::string>{};
}

}  // namespace vmerge
