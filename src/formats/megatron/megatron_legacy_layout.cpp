// Legacy (non-distributed) Megatron per-rank files: verl's model/mp_rank_*/model.pt or
// Megatron-LM's iter_NNNNNNN/mp_rank_*/model_optim_rng.pt. Grouped under --backend megatron.
#include <filesystem>

#include "core/error.h"
#include "io/input_tree.h"
#include "formats/backend.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/megatron/rank_file_assembly.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

// map (MapOptions::checkpoint_names): the canonical tensors joined by every tp rule their
// pieces allow, no table (config.json gives only the layer count rank settling needs).
void map_tp_assemblies(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
                       const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) {
    ArchitectureInfo arch;
    arch.layers = text_config_int(config, "num_hidden_layers", 0);
    arch.value_model = options.is_value_model;
    MegatronParallelism found;
    TpAssemblies assembled = assemble_megatron_legacy_alternatives(d.kept<MegatronLegacyCheckpoint>(), scans, arch,
                                                                   found, &ledger);
    m.facts["tp"] = found.tp;
    m.facts["pp"] = found.pp;
    m.facts["vpp"] = found.vpp;
    m.facts["ep"] = found.ep;
    m.mapping = std::move(assembled.mapping);
    m.tp_assemblies = std::move(assembled.rules);
}

class MegatronLegacyBackend final : public Backend {
public:
    std::string name() const override { return "megatron_legacy"; }
    std::vector<const BackendFlag*> flags() const override { return {&iteration_flag()}; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        const std::optional<int> iteration = request.flags.count("iteration");
        const fs::path iter = resolve_iteration_dir(request.local_dir, iteration);
        if (!looks_like_megatron_legacy(request.local_dir) && !path_exists(join_path(iter.string(), "mp_rank_00")) &&
            !path_exists(join_path(iter.string(), "mp_rank_00_000")))
            return {false, "no mp_rank_* folders, no latest_checkpointed_iteration.txt"};
        MegatronLegacyCheckpoint legacy = discover_megatron_legacy(request.local_dir, iteration);
        d.weights_dir = legacy.dir;
        d.description = legacy.flavor + " legacy per-rank files" +
                        (legacy.iteration ? " (iteration " + std::to_string(*legacy.iteration) + ")" : "");
        for (const auto& f : legacy.files) d.jobs.push_back({f.path});
        const std::string evidence = "mp_rank_* folders in " + legacy.dir;
        d.keep(std::move(legacy));
        return {true, evidence};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
             const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) const override {
        if (options.checkpoint_names) return map_tp_assemblies(d, scans, config, options, m, ledger);
        ArchitectureInfo arch = architecture_for(config, options.is_value_model, options.drop_mtp, options.loaded_tables());
        arch.pad_vocab = options.pad_vocab;
        TensorMapping canonical = assemble_rank_files(d, scans, arch, options, m, ledger);
        m.mapping = megatron_to_hf(std::move(canonical), arch, config, options.allow_unmapped, m.notes,
                                   &ledger, &m.facts["architecture_table"]);
    }

    bool records_parallelism() const override { return true; }

    InspectFacts inspect_facts(const DetectedCheckpoint&, const std::vector<ScannedFile>&) const override {
        InspectFacts facts;
        facts.parallelism_line = true;
        return facts;
    }
};

}  // namespace

TensorMapping assemble_rank_files(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans,
                                  const ArchitectureInfo& arch, const MapOptions& options, MappedCheckpoint& m,
                                  SourceLedger& ledger) {
    MegatronParallelism found;
    const auto& legacy = d.kept<MegatronLegacyCheckpoint>();
    TensorMapping canonical = assemble_megatron_legacy(legacy, scans, arch, found, &ledger);
    m.facts["tp"] = found.tp;
    m.facts["pp"] = found.pp;
    m.facts["vpp"] = found.vpp;
    m.facts["ep"] = found.ep;
    if (options.tp_size && *options.tp_size != found.tp)
        throw Error("--tp_size " + std::to_string(*options.tp_size) + " but " + legacy.dir + " holds tp " +
                    std::to_string(found.tp));
    if (options.pp_size && *options.pp_size != found.pp)
        throw Error("--pp_size " + std::to_string(*options.pp_size) + " but " + legacy.dir + " holds pp " +
                    std::to_string(found.pp));
    return canonical;
}

const Backend& megatron_legacy_backend() {
    static const MegatronLegacyBackend backend;
    return backend;
}

}  // namespace vmerge
