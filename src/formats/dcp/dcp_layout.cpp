// A plain torch.distributed.checkpoint folder (.metadata and *.distcp files) whose keys are
// the model's own names under the saved dict's container names.
#include <filesystem>

#include "formats/backend.h"
#include "formats/dcp/dcp_assembly.h"
#include "core/error.h"
#include "io/input_tree.h"
#include "formats/megatron/megatron_backend.h"
#include "formats/torchtitan/torchtitan_keys.h"

namespace vmerge {
namespace fs = std::filesystem;
namespace {

// Plain DCP keys carry the container names of the saved dict ("model." for
// dcp.save({"model": sd}), "module." for wrapped modules): strip them to get model names.
// What lies outside the "model" dict is dropped in the ledger; two keys that strip to one
// name are an Error.
TensorMapping strip_dcp_prefixes(TensorMapping mapping, const DcpMetadata& meta, SourceLedger& ledger) {
    TensorMapping out;
    out.sources = std::move(mapping.sources);
    out.source_scales = std::move(mapping.source_scales);  // torchao float8 weights' grids, by index
    OutputNames names(meta.dir + "/.metadata");
    bool any_model = false;
    for (const auto& t : mapping.tensors) any_model = any_model || t.name.starts_with("model.");
    for (auto& t : mapping.tensors) {
        std::string name = t.name;
        if (any_model) {
            if (!name.starts_with("model.")) {
                ledger.drop_output(t, out.sources, DropReason::OutsideModel);
                continue;
            }
            name = name.substr(6);
        }
        while (name.starts_with("module.")) name = name.substr(7);
        names.claim(name, t.name);
        t.name = name;
        out.tensors.push_back(std::move(t));
    }
    return out;
}

class DcpBackend final : public Backend {
public:
    std::string name() const override { return "dcp"; }

    Detection detect(const DetectRequest& request, DetectedCheckpoint& d) const override {
        if (!path_exists(join_path(request.local_dir, ".metadata"))) return {false, "no .metadata"};
        d.weights_dir = request.local_dir;
        DcpMetadata meta = read_dcp_metadata(request.local_dir);
        d.description = "torch.distributed.checkpoint folder";
        add_dcp_jobs(d, meta);
        d.keep(std::move(meta));
        return {true, ".metadata"};
    }

    void map(const DetectedCheckpoint& d, const std::vector<ScannedFile>& scans, const HfConfig&, const MapOptions&,
             MappedCheckpoint& m, SourceLedger& ledger) const override {
        const auto& meta = d.kept<DcpMetadata>();
        m.mapping = strip_dcp_prefixes(assemble_dcp_tensors(meta, scans, false, &ledger), meta, ledger);
        if (!m.mapping.source_scales.empty())
            m.notes.push_back(std::to_string(m.mapping.source_scales.size()) +
                              " torchao Float8Tensor weights (float8_e4m3fn codes + scales) dequantized: float32(code) x "
                              "scale, rounded once to the Float8Tensor's dtype, as torchao's dequantize()");
        // A torchtitan step read as plain DCP would keep torchtitan's names, which no HF loader reads.
        for (const auto& t : m.mapping.tensors)
            if (is_torchtitan_model_key(t.name))
                throw Error(meta.dir + "/.metadata: '" + t.name +
                            "' is a torchtitan name; plain DCP keeps names as they are: use --backend torchtitan");
        drop_non_weight_buffers(m.mapping, ledger, m.notes);
    }

    bool names_own_tensors() const override { return true; }
};

}  // namespace

const Backend& dcp_backend() {
    static const DcpBackend backend;
    return backend;
}

}  // namespace vmerge
