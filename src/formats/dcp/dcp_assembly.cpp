#include "formats/dcp/dcp_assembly.h"

#include <map>

#include "core/text_pattern.h"
#include "core/box_region.h"
#include "core/error.h"
#include "formats/megatron/megatron_backend.h"

namespace vmerge {
namespace {

// Splits one leading axis of a chunk: every index on `axis` becomes its own key.
struct AxisSplit {
    std::string prefix, suffix;  // key = prefix + index + suffix
};

// A multimodal model's parts (language_model., vision_model.) hold only model tensors.
bool is_model_key(const std::string& key) {
    return !megatron_submodel_prefix(key).empty() || key.starts_with("embedding.") || key.starts_with("decoder.") ||
           key.starts_with("output_layer.") || key.starts_with("mtp.");
}

}  // namespace

TensorMapping assemble_dcp_tensors(const DcpMetadata& meta, const std::vector<ScannedFile>& chunk_scans,
                                   bool split_megatron_axes, SourceLedger* ledger) {
    static const TextPattern stacked(R"(^decoder\.layers\.([^0-9].*)$)");
    static const TextPattern per_layer_experts(
        R"(^((?:decoder\.layers\.\d+|mtp\.layers\.\d+\.(?:transformer_layer|mtp_model_layer))\.mlp\.experts\.)experts\.(.*)$)");
    TensorMapping out;
    std::map<std::string, size_t> index;
    auto tensor_for = [&](const std::string& key, const DcpTensor& t, const Shape& shape) -> OutputTensor& {
        auto it = index.find(key);
        if (it == index.end()) {
            OutputTensor o;
            o.name = key;
            o.source_dtype = o.dtype = t.dtype;
            o.shape = shape;
            it = index.emplace(key, out.tensors.size()).first;
            out.tensors.push_back(std::move(o));
        }
        return out.tensors[it->second];
    };
    size_t scan = 0;
    for (const DcpTensor& t : meta.tensors) {
        const size_t first_scan = scan;
        scan += t.chunks.size();
        const bool model = !split_megatron_axes || is_model_key(t.fqn);
        if (!model || t.fqn.find("_extra_state") != std::string::npos) {
            if (ledger)
                for (size_t c = 0; c < t.chunks.size(); ++c)
                    for (const auto& e : chunk_scans.at(first_scan + c).tensors)
                        ledger->drop(e.tensor, model ? DropReason::ExtraState : DropReason::OutsideModel);
            continue;
        }
        // How many leading axes are layer/expert axes, and the key pattern they produce.
        std::vector<AxisSplit> axes;
        TextMatch m;
        // Each part of a multimodal model stacks its own layers: split as a GPTModel's, under its prefix.
        const std::string part(megatron_submodel_prefix(t.fqn));
        const std::string key = t.fqn.substr(part.size());
        if (split_megatron_axes && stacked.full_match(key, m)) {
            std::string rest = m[1];
            if (rest.starts_with("mlp.experts.experts.") && rest.find(".adapter.") != std::string::npos &&
                t.size.size() != 4)
                // SequentialMLP's per-expert adapters are [layers, experts, rows, cols]; a grouped
                // MLP's one adapter per layer has no expert axis to split (megatron_lora.cpp).
                throw Error(meta.dir + "/.metadata: '" + t.fqn + "' is " + shape_to_string(t.size) +
                            ", expected [layers, experts, rows, columns]: a Megatron-Bridge adapter shared by the "
                            "grouped experts (TEGroupedMLP), which vmerge does not support (torch_dist keeps only "
                            "expert-parallel rank 0's copy of it)");
            if (rest.starts_with("mlp.experts.experts.")) {
                axes.push_back({part + "decoder.layers.", ".mlp.experts."});
                axes.push_back({"", "." + rest.substr(std::string("mlp.experts.experts.").size())});
            } else {
                axes.push_back({part + "decoder.layers.", "." + rest});
            }
        } else if (split_megatron_axes && per_layer_experts.full_match(key, m)) {
            axes.push_back({part + std::string(m[1]), "." + std::string(m[2])});
        }
        // What stays of the shape once the layer/expert axes are split off.
        const Shape shape(t.size.begin() + static_cast<std::ptrdiff_t>(std::min(axes.size(), t.size.size())), t.size.end());
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const DcpChunk& chunk = t.chunks[c];
            const ScannedFile& scanned = chunk_scans.at(first_scan + c);
            auto where = [&] {
                return chunk.file + " at byte " + std::to_string(chunk.offset) + " ('" + t.fqn + "' chunk " +
                       shape_to_string(chunk.offsets) + ")";
            };
            if (scanned.tensors.size() != 1)
                throw Error(where() + ": expected one tensor in the item, found " + std::to_string(scanned.tensors.size()));
            const TensorRef& ref = scanned.tensors[0].tensor;
            if (ref.shape != chunk.sizes || ref.dtype != t.dtype)
                throw Error(where() + ": holds " + std::string(torch_name(ref.dtype)) + " " + shape_to_string(ref.shape) +
                            ", the metadata says " + std::string(torch_name(t.dtype)) + " " + shape_to_string(chunk.sizes));
            if (axes.size() > t.size.size()) throw Error(where() + ": too few dimensions for its layer/expert axes");
            const Shape offsets(chunk.offsets.begin() + static_cast<std::ptrdiff_t>(axes.size()), chunk.offsets.end());
            // Every combination of indices on the split axes becomes a view of the chunk.
            std::vector<int64_t> idx(axes.size(), 0);
            for (bool more = true; more;) {
                TensorRef view = ref;
                std::string key = axes.empty() ? t.fqn : "";
                for (size_t a = 0; a < axes.size(); ++a) {
                    key += axes[a].prefix + std::to_string(chunk.offsets[a] + idx[a]) + axes[a].suffix;
                    view = select_dim(view, 0, idx[a]);
                }
                OutputTensor& o = tensor_for(key, t, shape);
                const uint32_t source = static_cast<uint32_t>(out.sources.size());
                out.sources.push_back(view);
                add_copy(o, source, Shape(view.shape.size(), 0), offsets, view.shape);
                more = false;
                for (size_t a = axes.size(); a-- > 0;) {
                    if (++idx[a] < chunk.sizes[a]) {
                        more = true;
                        break;
                    }
                    idx[a] = 0;
                }
            }
        }
    }
    for (const auto& t : out.tensors) {
        try {
            check_copies_tile_output(t, out.sources);
        } catch (const Error& e) {
            throw Error(meta.dir + "/.metadata: " + e.what() + " (a chunk is missing or overlaps another)");
        }
    }
    return out;
}

}  // namespace vmerge
