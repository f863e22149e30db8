// The DeepSpeed ZeRO backend: DeepSpeedEngine.save_checkpoint folders (HF Trainer's
// checkpoint-N/, accelerate's save_state folder, OpenRLHF's _actor/), merged from the fp32
// master partitions of the optimizer files.
#include <filesystem>

#include "core/error.h"
#include "io/input_tree.h"
#include "formats/backend.h"
#include "formats/deepspeed/deepspeed_mapping.h"
#include "formats/deepspeed/deepspeed_scan.h"
#include "formats/hf_safetensors/hf_safetensors_layout.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

const BackendFlag& tag_flag() {
    static const BackendFlag flag{
        "tag", BackendFlag::Kind::Text, "t", "DeepSpeed: merge this tag folder instead of the one `latest` names",
        "the name of a DeepSpeed tag folder (global_step100)",
        "has no tags to choose from (--tag picks a DeepSpeed tag folder; a verl run folder takes --step N, "
        "Megatron-LM and torchtitan --iteration N)"};
    return flag;
}

// zero_to_fp32.py's flag of the same name.
const BackendFlag& exclude_frozen_flag() {
    static const BackendFlag flag{
        "exclude_frozen_parameters", BackendFlag::Kind::Switch, "",
        "DeepSpeed: leave out the parameters frozen in training (as zero_to_fp32.py's flag), each reported", "",
        "records no frozen parameters (the flag is zero_to_fp32.py's, for DeepSpeed checkpoints)"};
    return flag;
}

// HF Trainer saves a PeftModel under ZeRO with save_checkpoint(exclude_frozen_parameters=True)
// (transformers trainer.py, _save_checkpoint): the ZeRO files then hold the adapter's masters
// and no frozen base weight (no base_layer, no frozen_param_fragments).
bool holds_adapter_only(const TensorMapping& mapping) {
    bool adapter = false;
    for (const OutputTensor& t : mapping.tensors) {
        if (t.name.find(".base_layer.") != std::string::npos) return false;
        adapter = adapter || is_peft_adapter_tensor(t.name);
    }
    return adapter;
}

// The base model the adapter was trained on, before the adapter (apply_lora pairs them); a
// checkpoint that holds its base (a plain save_checkpoint) does not read --lora_base, and says so.
void add_lora_base(const DetectedCheckpoint& d, MappedCheckpoint& m) {
    const std::string lora_base = d.flags.text("lora_base");
    if (!holds_adapter_only(m.mapping)) {
        if (!lora_base.empty())
            m.notes.push_back("LoRA: --lora_base " + lora_base + " is not read: the frozen base is in " + d.weights_dir);
        return;
    }
    if (lora_base.empty())
        throw Error(d.weights_dir + ": the ZeRO files hold a PEFT adapter and no base weights (HF Trainer saves a PEFT "
                    "model with save_checkpoint(exclude_frozen_parameters=True)); pass --lora_base with the Hugging "
                    "Face model the run started from");
    put_lora_base_first(m.mapping, lora_base);
    m.notes.push_back("LoRA: the adapter from the ZeRO masters in " + d.weights_dir + ", the base weights from --lora_base " +
                      lora_base);
}

class DeepSpeedBackend final : public Backend {
public:
    std::string name() const override { return "deepspeed"; }
    std::vector<const BackendFlag*> flags() const override {
        return {&tag_flag(), &exclude_frozen_flag(), &lora_base_flag()};
    }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        if (!looks_like_deepspeed(request.local_dir)) return {false, "no latest file or *_optim_states.pt"};
        const std::optional<std::string> tag =
            request.flags.given("tag") ? std::optional(request.flags.text("tag")) : std::nullopt;
        DeepSpeedCheckpoint c = discover_deepspeed(request.local_dir, tag);
        d.weights_dir = c.tag_dir;
        d.description = "DeepSpeed ZeRO (tag " + c.tag + ", " + std::to_string(c.optim_files.size()) + " ranks)";
        // HF Trainer saves config.json and the tokenizer beside `latest`.
        if (path_exists(join_path(c.save_dir, "config.json"))) {
            d.default_hf_dir = c.save_dir;
            // What HF Trainer and DeepSpeed keep beside the model files
            // (docs/reference/deepspeed-formats.md §1); DeepSpeed 0.19 copies its recovery script
            // zero_to_torch.py there too.
            d.training_files = {"latest", "zero_to_fp32.py", "zero_to_torch.py", "trainer_state.json", "latest_universal"};
            if (fs::path(c.tag_dir).parent_path() == fs::path(c.save_dir))
                d.training_files.push_back(fs::path(c.tag_dir).filename().string() + "/");
        } else if (request.flags.given("lora_base")) {
            // HF Trainer with a PeftModel saves adapter files, not config.json: the base has it.
            d.default_hf_dir = request.flags.text("lora_base");
        }
        // PeftModel.save_pretrained's adapter_config.json beside `latest` records alpha and r.
        if (path_exists(join_path(c.save_dir, "adapter_config.json"))) {
            d.lora_adapter_dir = c.save_dir;
            if (!request.flags.given("lora_base") && !path_exists(join_path(c.save_dir, "config.json")))
                d.config_missing = c.save_dir + " holds a PEFT adapter saved by HF Trainer (adapter_config.json, no "
                                   "config.json); pass --lora_base with the Hugging Face model the run started from "
                                   "(its config.json, tokenizer and base weights)";
        }
        for (const auto& f : c.optim_files) d.jobs.push_back({f});
        for (const auto& f : c.model_files) d.jobs.push_back({f});
        const std::string evidence = "DeepSpeed tag folder " + c.tag_dir;
        d.keep(std::move(c));
        return {true, evidence};
    }

    ScannedFile scan(const ScanJob& job) const override {
        const InputFile file(job.path);
        return scan_deepspeed_file(file);
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig&, const MapOptions&,
             MappedCheckpoint& m, SourceLedger& ledger) const override {
        m.mapping = map_deepspeed(d.kept<DeepSpeedCheckpoint>(), scans, ledger, d.flags.given("exclude_frozen_parameters"),
                                  m.left_out, m.facts, m.notes);
        add_lora_base(d, m);
    }

    bool names_own_tensors() const override { return true; }

    InspectFacts inspect_facts(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans) const override {
        InspectFacts facts;
        facts.shardings = deepspeed_groups(d.kept<DeepSpeedCheckpoint>(), scans);
        return facts;
    }
};

}  // namespace

const Backend& deepspeed_backend() {
    static const DeepSpeedBackend backend;
    return backend;
}

}  // namespace vmerge
