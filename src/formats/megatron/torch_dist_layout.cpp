// Megatron-core torch_dist: verl's dist_ckpt/, or a Megatron-LM iteration folder with
// metadata.json beside a DCP .metadata. Grouped under --backend megatron.
#include <filesystem>

#include "formats/backend.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/megatron/torch_dist_layout.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

bool path_exists(const fs::path& p) {
    std::error_code ec;
    return fs::exists(p, ec);
}

class TorchDistBackend final : public Backend {
public:
    std::string name() const override { return "torch_dist"; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        const fs::path dir(request.local_dir);
        const fs::path iter = resolve_iteration_dir(request.local_dir, request.iteration);
        std::string evidence = "no dist_ckpt/ or metadata.json with .metadata";
        for (const fs::path& candidate : {dir / "dist_ckpt", iter})
            if (discover_torch_dist(candidate.string(), d, evidence)) return {true, candidate.string()};
        return {false, evidence};
    }

    void map(DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig& config,
             const MapOptions& options, MappedCheckpoint& m, SourceLedger& ledger) const override {
        const ArchitectureInfo arch = architecture_for(config, options.is_value_model, options.drop_mtp, options.architecture_tables);
        const TensorMapping canonical = assemble_dcp_tensors(d.dcp, scans, true, &ledger);
        m.mapping = megatron_to_hf(canonical, arch, config, options.tie_word_embedding, options.allow_unmapped, m.notes,
                                   &ledger, &m.facts["architecture_table"]);
    }
};

}  // namespace

bool discover_torch_dist(const std::string& folder, DetectedCheckpoint& d, std::string& evidence) {
    const fs::path candidate(folder);
    if (!path_exists(candidate / "metadata.json") || !path_exists(candidate / ".metadata")) return false;
    DcpMetadata meta = read_dcp_metadata(candidate.string());
    bool has_model = false;
    for (const auto& t : meta.tensors)
        has_model = has_model || t.fqn.starts_with("decoder.") || t.fqn.starts_with("embedding.");
    if (!has_model) {  // verl >= 0.7: dist_ckpt holds only optimizer state
        evidence = candidate.string() + " holds no model tensors";
        return false;
    }
    d.dcp = std::move(meta);
    d.weights_dir = candidate.string();
    d.description = "Megatron-core torch_dist (" + candidate.string() + ")";
    add_dcp_jobs(d);
    return true;
}

const Backend& torch_dist_backend() {
    static const TorchDistBackend backend;
    return backend;
}

}  // namespace vmerge
