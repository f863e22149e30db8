// The verl FSDP backend: model_world_size_{W}_rank_{R}.pt files, one per rank.
#include <algorithm>

#include "core/error.h"
#include "formats/backend.h"
#include "formats/fsdp/fsdp_backend.h"
#include "formats/hf_safetensors/hf_safetensors_layout.h"

namespace vmerge {
namespace {

// One example per distinct DTensor sharding, so a user sees mesh and placements at a glance.
nlohmann::ordered_json shardings_of(const ScannedFile& rank0) {
    nlohmann::ordered_json meshes = nlohmann::ordered_json::object();
    for (const auto& e : rank0.tensors) {
        std::string key = "plain tensor (concatenated on dim 0)";
        if (e.tensor.dtensor) {
            const auto& d = *e.tensor.dtensor;
            key = "mesh " + shape_to_string(d.mesh_shape) + " (";
            for (size_t i = 0; i < d.mesh_dim_names.size(); ++i) key += (i ? "," : "") + d.mesh_dim_names[i];
            key += ") placements (";
            for (size_t i = 0; i < d.placements.size(); ++i) key += (i ? ", " : "") + placement_to_string(d.placements[i]);
            key += ")";
        }
        if (!meshes.contains(key)) meshes[key] = nlohmann::ordered_json::array();
        meshes[key].push_back(e.key);
    }
    return meshes;
}

// verl's checkpoint.save_lora_only (docs/reference/verl-formats.md §2): every key of the rank files
// is an adapter key (`lora_` or `.adapter_`), the frozen base is saved nowhere.
bool holds_only_adapters(const TensorMapping& mapping) {
    return !mapping.tensors.empty() && std::all_of(mapping.tensors.begin(), mapping.tensors.end(), [](const OutputTensor& t) {
        return t.name.find("lora_") != std::string::npos || t.name.find(".adapter_") != std::string::npos;
    });
}

// The base model the adapter was trained on, before the adapter (apply_lora pairs them).
void add_lora_base(const FsdpCheckpoint& fsdp, const std::string& lora_base, MappedCheckpoint& m) {
    if (lora_base.empty())
        throw Error(fsdp.dir + ": a verl FSDP save_lora_only checkpoint (the rank files hold only lora_ adapter "
                    "tensors; the frozen base is saved nowhere); pass --lora_base with the Hugging Face model it was "
                    "trained on (actor_rollout_ref.model.path)");
    put_lora_base_first(m.mapping, lora_base);
    m.notes.push_back("LoRA-only checkpoint (save_lora_only): base weights from " + lora_base);
}

class FsdpBackend final : public Backend {
public:
    std::string name() const override { return "fsdp"; }
    std::vector<const BackendFlag*> flags() const override { return {&lora_base_flag()}; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        if (!looks_like_fsdp(request.local_dir)) return {false, "no model_world_size_*_rank_*.pt"};
        FsdpCheckpoint fsdp = discover_fsdp(request.local_dir);
        d.description = "verl FSDP (world size " + std::to_string(fsdp.world_size) + ")";
        d.notes = fsdp.notes;
        for (const auto& f : fsdp.rank_files) d.jobs.push_back({f});
        d.keep(std::move(fsdp));
        return {true, "model_world_size_*_rank_*.pt files"};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig&, const MapOptions&,
             MappedCheckpoint& m, SourceLedger& ledger) const override {
        const auto& fsdp = d.kept<FsdpCheckpoint>();
        m.facts["world_size"] = fsdp.world_size;
        m.facts["world_size_inferred"] = fsdp.world_size_inferred;
        m.mapping = map_fsdp(scans, &ledger);
        drop_non_weight_buffers(m.mapping, ledger, m.notes);
        if (holds_only_adapters(m.mapping)) add_lora_base(fsdp, d.flags.text("lora_base"), m);
    }

    bool names_own_tensors() const override { return true; }

    InspectFacts inspect_facts(const DetectedCheckpoint&, const std::vector<ScannedFile>& scans) const override {
        InspectFacts facts;
        if (!scans.empty()) facts.shardings = shardings_of(scans[0]);
        return facts;
    }
};

}  // namespace

const Backend& fsdp_backend() {
    static const FsdpBackend backend;
    return backend;
}

}  // namespace vmerge
