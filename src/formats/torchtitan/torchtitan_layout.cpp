// torchtitan checkpoints (docs/reference/torchtitan-formats.md): a DCP step folder `step-N/` under
// {dump_folder}/checkpoint/ (standalone) or verl's `global_step_N/` (its torchtitan engine),
// model FQNs at the top level beside the training state of a full step. Names go to HF by
// the torchtitan architecture table of config.json's architecture (share/vmerge/architectures).
// A last step saved with last_save_in_hf holds HF safetensors (already to_hf's names, with
// model.safetensors.index.json; the per-rank pieces in sharded/ are not read): copied as they are.
#include <filesystem>

#include "core/text_pattern.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "formats/backend.h"
#include "formats/dcp/dcp_assembly.h"
#include "formats/hf_safetensors/hf_safetensors_layout.h"
#include "formats/table_mapping.h"
#include "formats/torchtitan/torchtitan_keys.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

bool has_metadata(const fs::path& dir) { return entry_kind((dir / ".metadata").string()) == EntryKind::file; }

const TextPattern kStepName(R"(^step-(\d{1,9})$)");

// A step-N folder torchtitan wrote with last_save_in_hf: its consolidated HF index (torchtitan
// counts a step as a checkpoint when it holds .metadata or this index).
bool is_hf_step(const fs::path& dir) {
    return kStepName.full_match(dir.filename().string()) && !has_metadata(dir) &&
           entry_kind((dir / "model.safetensors.index.json").string()) == EntryKind::file;
}

// The step folders (step-N with a .metadata or an HF index) directly under `dir`, by N.
std::map<int, fs::path> step_folders(const fs::path& dir) {
    std::map<int, fs::path> steps;
    for (const auto& entry : list_input_folder(dir.string())) {
        const std::string& name = entry.name;
        const fs::path path = dir / name;
        TextMatch m;
        if (entry.is_folder && kStepName.full_match(name, m) && (has_metadata(path) || is_hf_step(path)))
            steps[std::stoi(m[1])] = path;
    }
    return steps;
}

// The step folder `local_dir` names: itself when it holds .metadata (or is an HF step), else
// the latest step-N (or --iteration's) under it or under its checkpoint/ folder; "" when none.
fs::path find_step_folder(const fs::path& local_dir, std::optional<int> iteration) {
    if (has_metadata(local_dir) || is_hf_step(local_dir)) return local_dir;
    for (const fs::path& dir : {local_dir, local_dir / "checkpoint"}) {
        const auto steps = step_folders(dir);
        if (steps.empty()) continue;
        if (!iteration) return steps.rbegin()->second;
        if (auto it = steps.find(*iteration); it != steps.end()) return it->second;
        std::string found;
        for (const auto& [n, _] : steps) found += (found.empty() ? "" : ", ") + std::to_string(n);
        throw Error((dir / ("step-" + std::to_string(*iteration))).string() + ": missing (--iteration " +
                    std::to_string(*iteration) + "; steps with a .metadata: " + found + ")");
    }
    return {};
}

class TorchtitanBackend final : public Backend {
public:
    std::string name() const override { return "torchtitan"; }
    std::vector<const BackendFlag*> flags() const override { return {&iteration_flag()}; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        const fs::path step = find_step_folder(request.local_dir, request.flags.count("iteration"));
        if (step.empty()) return {false, "no step-N/.metadata"};
        if (is_hf_step(step)) {
            d.weights_dir = step.string();
            d.hf_named = true;
            d.description = "torchtitan HF safetensors " + step.filename().string() + " (last_save_in_hf)";
            d.notes.push_back(step.string() + " was saved with last_save_in_hf: Hugging Face names already, copied as they are");
            return {true, step.filename().string() + "/model.safetensors.index.json (torchtitan last_save_in_hf)"};
        }
        DcpMetadata meta = read_dcp_metadata(step.string());
        const std::string key = first_torchtitan_key(meta);
        if (key.empty()) return {false, "no torchtitan keys (tok_embeddings.weight, layers.N.attention...)"};
        d.weights_dir = step.string();
        d.description = "torchtitan DCP checkpoint " + step.filename().string();
        add_dcp_jobs(d, meta);
        d.keep(std::move(meta));
        return {true, step.filename().string() + "/.metadata with torchtitan keys (" + key + ")"};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config, const MapOptions& options,
             MappedCheckpoint& m, SourceLedger& ledger) const override {
        if (d.hf_named) {
            m.mapping = map_hf_safetensors(d.weights_dir, &m.notes);  // checked against config.json like FSDP's names
            return;
        }
        const auto& meta = d.kept<DcpMetadata>();
        TensorMapping all = assemble_dcp_tensors(meta, scans, false, &ledger);
        // torchtitan's float8 training stores high-precision weights (WeightWithDynamicFloat8CastTensor);
        // float8 codes with scales come from torchao's quantize_, which torchtitan does not save.
        if (!all.source_scales.empty())
            throw Error(meta.dir + "/.metadata: '" + all.source_scales.front().scales.name.substr(
                            0, all.source_scales.front().scales.name.rfind('.')) +
                        "' is a torchao Float8Tensor (float8 codes and scales); vmerge reads those in plain DCP "
                        "saves (--backend dcp), not through torchtitan's name tables");
        TensorMapping model;
        model.sources = std::move(all.sources);
        size_t training_state = 0;
        for (auto& t : all.tensors) {
            if (!is_torchtitan_training_state(t.name)) {
                model.tensors.push_back(std::move(t));
                continue;
            }
            ledger.drop_output(t, model.sources, DropReason::OutsideModel);
            ++training_state;
        }
        if (training_state)
            m.notes.push_back("full training checkpoint: " + std::to_string(training_state) +
                              " optimizer / lr_scheduler / dataloader / train_state tensors not written");
        if (model.tensors.empty()) throw Error(meta.dir + "/.metadata: no model tensors (only training state)");
        if (options.checkpoint_names) {
            m.mapping = std::move(model);
            return;
        }
        const ArchitectureTables& tables = options.loaded_tables();
        const std::string arch = config.architectures.empty() ? "" : config.architectures[0];
        const ArchitectureTable* table = find_architecture_table(tables, "torchtitan", arch);
        if (!table)
            throw Error(config.dir + "/config.json: no torchtitan architecture table for '" + arch + "' (tables for: " +
                        table_architectures(tables, "torchtitan") + "); pass --architecture_table FILE");
        TableApplication applied =
            apply_architecture_table(model, *table, config, options.allow_unmapped, m.notes, ledger);
        check_table_output(applied.mapping, *table, config, tables, m.notes);
        m.mapping = std::move(applied.mapping);
        m.facts["architecture_table"] = std::move(applied.applied);
    }
};

}  // namespace

const Backend& torchtitan_backend() {
    static const TorchtitanBackend backend;
    return backend;
}

}  // namespace vmerge
