// verl's Megatron checkpoint layout v2 (docs/reference/verl-formats.md §1): ckpt_contents.json
// names where the model is (model/dist_ckpt/ as torch_dist shards, or model/huggingface/ as HF
// weights) and where config and tokenizer are. The archives themselves are read by the torch_dist
// and HF safetensors rules. Grouped under --backend megatron, tried first.
#include <filesystem>

#include "core/error.h"
#include "io/object_url.h"
#include "io/input_tree.h"
#include "formats/backend.h"
#include "formats/hf_safetensors/hf_safetensors_layout.h"
#include "formats/megatron/torch_dist_layout.h"
#include "formats/verl_v2/verl_manifest.h"
#include "io/input_file.h"
#include "io/json_file.h"

namespace vmerge {

const Backend& torch_dist_backend();

namespace fs = std::filesystem;
namespace {

// Through the input tree (io/input_tree.h), so that an s3:// checkpoint is read as a folder.
bool is_dir(const fs::path& p) { return ::vmerge::is_folder(p.string()); }

bool path_exists(const fs::path& p) { return ::vmerge::path_exists(p.string()); }

bool holds_safetensors(const fs::path& dir) {
    for (const auto& entry : list_input_folder(dir.string()))
        if (!entry.is_folder && entry.name.ends_with(".safetensors")) return true;
    return false;
}

// verl's own test (megatron_checkpoint_manager) is "model/, optimizer/ or extra/ exists"; a
// legacy verl Megatron save also has model/ (model/mp_rank_*/), so the v2 subfolders are named.
bool looks_like_v2(const fs::path& dir) {
    return path_exists(dir / kVerlManifestName) || is_dir(dir / "model" / "dist_ckpt") ||
           is_dir(dir / "model" / "huggingface") || is_dir(dir / "optimizer" / "dist_ckpt") ||
           is_dir(dir / "extra" / "dist_ckpt");
}

// Two paths holding the same bytes: one file (hardlink, or through a directory symlink), or equal copies.
bool same_file(const fs::path& a, const fs::path& b) {
    if (is_object_url(a.string()))  // objects: no links; equal sizes, then equal bytes
        return InputFile(a.string()).size() == InputFile(b.string()).size() &&
               read_small_file(a.string(), uint64_t{1} << 30, "a torch_dist .metadata") ==
                   read_small_file(b.string(), uint64_t{1} << 30, "a torch_dist .metadata");
    std::error_code ec;
    if (fs::equivalent(a, b, ec)) return true;
    if (ec || fs::file_size(a, ec) != fs::file_size(b, ec) || ec) return false;
    constexpr uint64_t kMaxCompared = uint64_t{1} << 30;
    return read_small_file(a.string(), kMaxCompared, "a torch_dist .metadata") ==
           read_small_file(b.string(), kMaxCompared, "a torch_dist .metadata");
}

// verl's migration script (scripts/migrate_megatron_checkpoint_layout.py) mirrors the one
// pre-v2 dist_ckpt/ into model/, optimizer/ and extra/ (hardlinks, a symlink or copies) and
// writes no manifest: three archives with one .metadata. A native v2 save writes three
// different archives.
bool is_migrated(const fs::path& dir) {
    const fs::path model = dir / "model" / "dist_ckpt" / ".metadata";
    return path_exists(model) && path_exists(dir / "optimizer" / "dist_ckpt" / ".metadata") &&
           path_exists(dir / "extra" / "dist_ckpt" / ".metadata") &&
           same_file(model, dir / "optimizer" / "dist_ckpt" / ".metadata") &&
           same_file(model, dir / "extra" / "dist_ckpt" / ".metadata");
}

// The model slot as the manifest states it: torch_dist shards or HF safetensors, nothing else.
void read_model_slot(const fs::path& dir, const VerlManifestEntry& model, const std::string& where,
                     DetectedCheckpoint& d) {
    const fs::path folder = dir / model.path;
    if (!is_dir(folder)) throw Error(where + " contents.model: " + folder.string() + " is missing");
    if (model.format == kVerlDistFormat) {
        std::string evidence = "no metadata.json with .metadata";
        if (!discover_torch_dist(folder.string(), d, evidence))
            throw Error(where + " puts the model in " + folder.string() + " (" + kVerlDistFormat + "), but it has " +
                        evidence);
        return;
    }
    if (!holds_safetensors(folder) && !model.peft_adapter_path.empty()) {
        // Megatron-Bridge LoRA (bridge, dist off): the bridge exports the adapter INSTEAD of the
        // weights; the frozen base is saved nowhere.
        const fs::path adapter = dir / model.peft_adapter_path;
        if (!path_exists(adapter / "adapter_model.safetensors"))
            throw Error(where + " puts the model in " + folder.string() + " with the PEFT adapter in " +
                        adapter.string() + ", but neither holds weights (no *.safetensors, no adapter_model.safetensors)");
        d.lora_adapter_dir = adapter.string();
        d.weights_dir = adapter.string();
        return;
    }
    if (!holds_safetensors(folder))
        throw Error(where + " puts the model in " + folder.string() + " (" + kVerlHfFormat +
                    " weights), but it holds no *.safetensors");
    d.weights_dir = folder.string();
}

// The bridge's adapter export under the names apply_lora pairs with the base: PEFT files drop
// the adapter name (`lora_A.weight`); the state dict form has it (`lora_A.default.weight`).
TensorMapping adapter_export(const std::string& dir) {
    TensorMapping adapter = map_safetensors_file(dir + "/adapter_model.safetensors");
    for (OutputTensor& t : adapter.tensors)
        for (const char* part : {".lora_A.weight", ".lora_B.weight"})
            if (t.name.ends_with(part)) {
                const std::string ab = std::string(part).substr(1, 6);
                t.name = t.name.substr(0, t.name.size() - std::string(part).size()) + "." + ab + ".default.weight";
            }
    return adapter;
}

void map_adapter_export(const DetectedCheckpoint& d, MappedCheckpoint& m) {
    const std::string lora_base = d.flags.text("lora_base");
    if (lora_base.empty())
        throw Error(d.lora_adapter_dir + ": a Megatron-Bridge LoRA save holds the adapter only (with LoRA verl exports "
                    "the adapter instead of the weights and saves the frozen base nowhere); pass --lora_base with the "
                    "Hugging Face model the run started from (actor_rollout_ref.model.path)");
    m.mapping = map_hf_safetensors(lora_base, &m.notes);
    append_mapping(m.mapping, adapter_export(d.lora_adapter_dir));
    m.notes.push_back("Megatron-Bridge LoRA: the adapter from " + d.lora_adapter_dir + ", the base weights from " +
                      lora_base);
}

std::string missing_config_text(const std::string& why) {
    return why + "; pass --hf_config with the Hugging Face model the run started from "
                 "(actor_rollout_ref.model.path: its config.json and tokenizer)";
}

// True when the model shards (model/dist_ckpt/, kept by discover_torch_dist) hold adapters.
bool holds_adapter_shards(const DetectedCheckpoint& d) {
    const DcpMetadata* dcp = d.kept_if<DcpMetadata>();
    if (!dcp) return false;
    for (const auto& t : dcp->tensors)
        if (t.fqn.find(".adapter.") != std::string::npos) return true;
    return false;
}

// PEFT with use_dist_checkpointing: the frozen base, the adapters and their _extra_state are
// all in the model archive (read by the torch_dist rules). With hf_model also saved, the
// bridge's adapter export beside it records alpha (its weights equal the shards').
void check_lora_shards(const fs::path& dir, const VerlManifestEntry& model, const std::string& where,
                       DetectedCheckpoint& d) {
    const fs::path adapter_export = dir / "model" / "huggingface" / "adapter";
    const bool exported = path_exists(adapter_export / "adapter_config.json");
    if (!holds_adapter_shards(d))
        throw Error(where + " records PEFT (backend.peft) with the model in " + model.path + ", but " + d.weights_dir +
                    " holds no adapter tensors (<module>.adapter.linear_in/linear_out): merging it would drop the "
                    "trained adapter");
    if (exported) d.lora_adapter_dir = adapter_export.string();
    d.notes.push_back(exported ? "LoRA: lora_alpha from " + (adapter_export / "adapter_config.json").string() +
                                     " (its weights are the shards' adapter, read from " + model.path + ")"
                               : "LoRA: lora_alpha is recorded nowhere in this save (use_dist_checkpointing without "
                                 "hf_model): it comes from --lora_alpha");
}

// A save that wrote ckpt_contents.json (its last act): the manifest decides.
void discover_from_manifest(const fs::path& dir, const VerlManifest& m, const std::string& where,
                            DetectedCheckpoint& d) {
    if (!m.model)
        throw Error(where + ": records no 'model' in contents (save_contents without model): there are no weights "
                    "to merge in this checkpoint");
    read_model_slot(dir, *m.model, where, d);
    if (m.peft && m.model->format == kVerlDistFormat) check_lora_shards(dir, *m.model, where, d);
    if (m.hf_config) {
        d.default_hf_dir = (dir / m.hf_config->path).string();
    } else {
        d.default_hf_dir.clear();
        d.config_missing = missing_config_text(
            where + " records no hf_config: verl writes config.json and the tokenizer only with HF weights, and "
                         "this save keeps the model in " + m.model->path + " only");
    }
    if (m.tokenizer && m.hf_config && m.tokenizer->path != m.hf_config->path)
        d.notes.push_back("the tokenizer files are copied from " + d.default_hf_dir + " (hf_config), not from " +
                          m.tokenizer->path);
    std::string model_in = m.model->path;
    if (holds_adapter_shards(d)) model_in += ", with LoRA adapter shards";
    else if (!d.lora_adapter_dir.empty()) model_in = d.lora_adapter_dir + ": a LoRA adapter";
    d.description = "verl Megatron layout v2 (" + where + ", model in " + model_in + ")";
}

// No manifest, by design (migrated) or because the save did not finish (--allow_incomplete):
// the model shards if model/dist_ckpt/ holds model tensors, else HF weights in model/huggingface/.
void discover_without_manifest(const fs::path& dir, const std::string& what, DetectedCheckpoint& d) {
    std::string evidence;
    const fs::path hf = dir / "model" / "huggingface";
    if (!discover_torch_dist((dir / "model" / "dist_ckpt").string(), d, evidence)) {
        if (!holds_safetensors(hf))
            throw Error(dir.string() + ": " + what + " with no model weights: model/dist_ckpt/ " +
                        (evidence.empty() ? std::string("is no torch_dist archive") : "has " + evidence) +
                        " and model/huggingface/ holds no *.safetensors");
        d.weights_dir = hf.string();
    }
    if (path_exists(hf / "config.json")) d.default_hf_dir = hf.string();
    else {
        d.default_hf_dir.clear();
        d.config_missing = missing_config_text(dir.string() + ": " + what + " with no model/huggingface/config.json");
    }
    d.description = "verl Megatron layout v2, " + what + " (model from " +
                    (!d.kept_if<DcpMetadata>() ? std::string("model/huggingface") : std::string("model/dist_ckpt")) + ")";
}

// verl writes ckpt_contents.json last: without it a save is read only when asked.
const BackendFlag& allow_incomplete_flag() {
    static const BackendFlag flag{
        "allow_incomplete", BackendFlag::Kind::Switch, "",
        "read a verl layout v2 save that has no ckpt_contents.json (verl writes it last: the save did not finish)", "",
        "is no verl layout v2 save (--allow_incomplete reads one whose ckpt_contents.json is missing)"};
    return flag;
}

class VerlV2Backend final : public Backend {
public:
    std::string name() const override { return "verl_v2"; }
    std::vector<const BackendFlag*> flags() const override { return {&lora_base_flag(), &allow_incomplete_flag()}; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        const fs::path dir(request.local_dir);
        if (!looks_like_v2(dir)) return {false, "no ckpt_contents.json or model/dist_ckpt/"};
        const fs::path manifest_path = dir / kVerlManifestName;
        const std::string where = manifest_path.string();
        std::optional<VerlManifest> manifest;
        if (path_exists(manifest_path)) manifest = parse_verl_manifest(read_json_file(where), where);
        if (manifest && manifest->schema_version == 2) {
            discover_from_manifest(dir, *manifest, where, d);
            return {true, where};
        }
        if (is_migrated(dir)) {
            discover_without_manifest(dir, "migrated from the pre-v2 layout (scripts/migrate_megatron_checkpoint_layout.py)", d);
            d.notes.push_back(dir.string() + ": a checkpoint migrated to layout v2 (model/, optimizer/ and extra/ mirror "
                              "one pre-v2 dist_ckpt/); its optimizer and rng items are not model weights");
            return {true, "layout v2 migrated from pre-v2 (no manifest by design)"};
        }
        if (manifest)
            throw Error(where + ": schema_version " + std::to_string(manifest->schema_version) +
                        ": expected 2 (verl layout v2) for a folder with model/, optimizer/ or extra/");
        if (!request.flags.given("allow_incomplete"))
            throw Error(dir.string() + ": a verl layout v2 checkpoint (model/, optimizer/, extra/) without " +
                        kVerlManifestName + ": verl writes it last, so this save did not complete (interrupted, "
                        "or an async save still running); merge a completed step, or pass --allow_incomplete to "
                        "read what is there");
        discover_without_manifest(dir, "an incomplete save (no ckpt_contents.json, read with --allow_incomplete)", d);
        d.notes.push_back(dir.string() + " has no " + kVerlManifestName +
                          " (the save did not complete): merged as found because of --allow_incomplete");
        return {true, "layout v2 without a manifest (--allow_incomplete)"};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
             const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) const override {
        if (d.kept_if<DcpMetadata>()) {
            torch_dist_backend().map(d, scans, config, options, m, ledger);
            return;
        }
        if (!d.lora_adapter_dir.empty()) map_adapter_export(d, m);
        else m.mapping = map_hf_safetensors(d.weights_dir, &m.notes);
    }
};

}  // namespace

const Backend& verl_v2_backend() {
    static const VerlV2Backend backend;
    return backend;
}

}  // namespace vmerge
