// verl's Megatron LoRA adapter_checkpoint/ (adapter only: verl does not save the frozen
// base, which comes from --lora_base). Grouped under --backend megatron.
#include "architecture/config_check.h"
#include "core/error.h"
#include "formats/backend.h"
#include "formats/hf_safetensors/hf_safetensors_layout.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/megatron/megatron_lora.h"
#include "formats/megatron/rank_file_assembly.h"

namespace vmerge {
namespace {

class MegatronAdapterBackend final : public Backend {
public:
    std::string name() const override { return "megatron_adapter"; }
    std::vector<const BackendFlag*> flags() const override { return {&lora_base_flag()}; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        if (!has_megatron_adapters(request.local_dir)) return {false, "no adapter_checkpoint/"};
        MegatronLegacyCheckpoint adapters = discover_megatron_adapters(request.local_dir);
        d.weights_dir = adapters.dir;
        d.description = "verl Megatron LoRA adapter checkpoint (" + adapters.dir + ")";
        for (const auto& f : adapters.files) d.jobs.push_back({f.path});
        d.keep(std::move(adapters));
        return {true, d.weights_dir};
    }

    // The base model's tensors as they are, then the adapter's in PEFT form.
    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
             const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) const override {
        const std::string lora_base = d.flags.text("lora_base");
        if (lora_base.empty())
            throw Error(d.weights_dir + ": a Megatron LoRA adapter checkpoint without its base weights (verl does not save "
                        "the frozen base with LoRA); pass --lora_base with the Hugging Face model it was trained on "
                        "(actor_rollout_ref.model.path)");
        ArchitectureInfo arch = architecture_for(config, options.is_value_model, options.drop_mtp, options.loaded_tables());
        arch.pad_vocab = options.pad_vocab;
        const TensorMapping canonical = assemble_rank_files(d, scans, arch, options, m, ledger);
        const TensorMapping adapters = megatron_adapters_to_peft(canonical, arch, config, m.notes);
        m.mapping = map_hf_safetensors(lora_base, &m.notes);
        check_against_config(m.mapping, config, arch);
        append_mapping(m.mapping, adapters);
        m.notes.push_back("base weights from " + lora_base);
    }

    bool records_parallelism() const override { return true; }
};

}  // namespace

const Backend& megatron_adapter_backend() {
    static const MegatronAdapterBackend backend;
    return backend;
}

}  // namespace vmerge
