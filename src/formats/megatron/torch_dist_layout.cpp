// Megatron-core torch_dist: verl's dist_ckpt/, or a Megatron-LM iteration folder with
// metadata.json beside a DCP .metadata. Grouped under --backend megatron.
#include <filesystem>

#include "architecture/config_check.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "formats/backend.h"
#include "formats/dcp/dcp_assembly.h"
#include "formats/hf_safetensors/hf_safetensors_layout.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/megatron/megatron_lora.h"
#include "formats/megatron/torch_dist_layout.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

// The base of a LoRA archive: its own frozen weights (PEFT with use_dist_checkpointing saves
// them beside the adapters), or --lora_base when the archive was filtered to the adapters.
TensorMapping lora_base_weights(const DetectedCheckpoint& d, const TensorMapping& canonical, const HfConfig& config,
                                const ArchitectureInfo& arch, const MapOptions& options, MappedCheckpoint& m,
                                SourceLedger& ledger) {
    const std::string lora_base = d.flags.text("lora_base");
    if (canonical.tensors.empty()) {
        if (lora_base.empty())
            throw Error(d.weights_dir + ": holds only Megatron-Bridge LoRA adapter shards (linear_in/linear_out), not "
                        "the frozen base; pass --lora_base with the Hugging Face model the run started from "
                        "(verl: actor_rollout_ref.model.path)");
        TensorMapping base = map_hf_safetensors(lora_base, &m.notes);
        check_against_config(base, config, arch);
        m.notes.push_back("LoRA: the base weights from --lora_base " + lora_base);
        return base;
    }
    if (!lora_base.empty())
        m.notes.push_back("LoRA: --lora_base " + lora_base + " is not read: the frozen base is in " + d.weights_dir);
    return megatron_to_hf(canonical, arch, config, options.allow_unmapped, m.notes, &ledger,
                          &m.facts["architecture_table"]);
}

// map (MapOptions::checkpoint_names): the canonical tensors, no table; an adapter-only save has
// no model to learn names from.
void map_canonical_names(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, MappedCheckpoint& m,
                         SourceLedger& ledger) {
    TensorMapping canonical = assemble_dcp_tensors(d.kept<DcpMetadata>(), scans, true, &ledger);
    if (!take_megatron_adapters(canonical).tensors.empty())
        throw Error(d.weights_dir + " holds LoRA adapter shards: map learns names from a full model's checkpoint");
    m.mapping = std::move(canonical);
}

class TorchDistBackend final : public Backend {
public:
    std::string name() const override { return "torch_dist"; }
    std::vector<const BackendFlag*> flags() const override { return {&iteration_flag(), &lora_base_flag()}; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        const fs::path dir(request.local_dir);
        const fs::path iter = resolve_iteration_dir(request.local_dir, request.flags.count("iteration"));
        std::string evidence = "no dist_ckpt/ or metadata.json with .metadata";
        for (const fs::path& candidate : {dir / "dist_ckpt", iter})
            if (discover_torch_dist(candidate.string(), d, evidence)) return {true, candidate.string()};
        return {false, evidence};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
             const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) const override {
        if (options.checkpoint_names) return map_canonical_names(d, scans, m, ledger);
        ArchitectureInfo arch =
            architecture_for(config, options.is_value_model, options.drop_mtp, options.loaded_tables());
        arch.pad_vocab = options.pad_vocab;
        TensorMapping canonical = assemble_dcp_tensors(d.kept<DcpMetadata>(), scans, true, &ledger);
        const TensorMapping adapters = take_megatron_adapters(canonical);
        if (adapters.tensors.empty()) {
            m.mapping = megatron_to_hf(std::move(canonical), arch, config, options.allow_unmapped,
                                       m.notes, &ledger, &m.facts["architecture_table"]);
            return;
        }
        // Megatron-Bridge PEFT: the adapters in PEFT form beside the base, for apply_lora.
        m.mapping = lora_base_weights(d, canonical, config, arch, options, m, ledger);
        append_mapping(m.mapping, megatron_adapters_to_peft(adapters, arch, config, m.notes));
        m.notes.push_back("LoRA: the adapter (Megatron-Bridge linear_in/linear_out) from the shards in " + d.weights_dir);
        m.lora_alpha_unrecorded = d.weights_dir + " holds Megatron-Bridge LoRA adapter shards, which record no LoRA "
                                  "alpha (verl writes it only into the HF adapter export "
                                  "model/huggingface/adapter/adapter_config.json, which this save does not have)";
    }
};

}  // namespace

bool discover_torch_dist(const std::string& folder, DetectedCheckpoint& d, std::string& evidence) {
    const fs::path candidate(folder);
    if (!path_exists(join_path(folder, "metadata.json")) || !path_exists(join_path(folder, ".metadata"))) return false;
    DcpMetadata meta = read_dcp_metadata(candidate.string());
    bool has_model = false;
    for (const auto& t : meta.tensors)
        has_model = has_model || t.fqn.starts_with("decoder.") || t.fqn.starts_with("embedding.") ||
                    !megatron_submodel_prefix(t.fqn).empty();
    if (!has_model) {  // verl >= 0.7: dist_ckpt holds only optimizer state
        evidence = candidate.string() + " holds no model tensors";
        return false;
    }
    d.weights_dir = candidate.string();
    d.description = "Megatron-core torch_dist (" + candidate.string() + ")";
    add_dcp_jobs(d, meta);
    d.keep(std::move(meta));
    return true;
}

const Backend& torch_dist_backend() {
    static const TorchDistBackend backend;
    return backend;
}

}  // namespace vmerge
