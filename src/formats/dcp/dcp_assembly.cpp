#include "formats/dcp/dcp_assembly.h"

#include <map>

#include "core/text_pattern.h"
#include "core/box_region.h"
#include "core/error.h"
#include "formats/dcp/dcp_float8_items.h"
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

// The leading axes of a Megatron torch_dist tensor that are layer/expert axes (decoder layers
// stacked into one tensor, SequentialMLP experts stacked per layer), and the key each index gives.
std::vector<AxisSplit> megatron_axis_splits(const DcpMetadata& meta, const DcpTensor& t) {
    static const TextPattern stacked(R"(^decoder\.layers\.([^0-9].*)$)");
    static const TextPattern per_layer_experts(
        R"(^((?:decoder\.layers\.\d+|mtp\.layers\.\d+\.(?:transformer_layer|mtp_model_layer))\.mlp\.experts\.)experts\.(.*)$)");
    // Each part of a multimodal model stacks its own layers: split as a GPTModel's, under its prefix.
    const std::string part(megatron_submodel_prefix(t.fqn));
    const std::string key = t.fqn.substr(part.size());
    TextMatch m;
    if (per_layer_experts.full_match(key, m)) return {{part + std::string(m[1]), "." + std::string(m[2])}};
    if (!stacked.full_match(key, m)) return {};
    const std::string rest = m[1];
    const std::string experts = "mlp.experts.experts.";
    if (!rest.starts_with(experts)) return {{part + "decoder.layers.", "." + rest}};
    if (rest.find(".adapter.") != std::string::npos && t.size.size() != 4)
        // SequentialMLP's per-expert adapters are [layers, experts, rows, cols]; a grouped
        // MLP's one adapter per layer has no expert axis to split (megatron_lora.cpp).
        throw Error(meta.dir + "/.metadata: '" + t.fqn + "' is " + shape_to_string(t.size) +
                    ", expected [layers, experts, rows, columns]: a Megatron-Bridge adapter shared by the "
                    "grouped experts (TEGroupedMLP), which vmerge does not support (torch_dist keeps only "
                    "expert-parallel rank 0's copy of it)");
    return {{part + "decoder.layers.", ".mlp.experts."}, {"", "." + rest.substr(experts.size())}};
}

// The one tensor a chunk's item holds, checked against what .metadata says of the chunk.
const TensorRef& chunk_tensor(const DcpTensor& t, const DcpChunk& chunk, const ScannedFile& scanned,
                              size_t split_axes) {
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
    if (split_axes > t.size.size()) throw Error(where() + ": too few dimensions for its layer/expert axes");
    return ref;
}

// The mapping being assembled: output tensors in first-seen order, each built once, and the
// source views copied into them.
class MappingBuilder {
public:
    explicit MappingBuilder(TensorMapping& out) : out_(out) {}
    // Copies `view` into the output tensor `key` (created on first use) at `offsets`.
    void add_view(const std::string& key, DType dtype, const Shape& shape, const TensorRef& view, const Shape& offsets) {
        auto it = index_.find(key);
        if (it == index_.end()) {
            OutputTensor o;
            o.name = key;
            o.source_dtype = o.dtype = dtype;
            o.shape = shape;
            it = index_.emplace(key, out_.tensors.size()).first;
            out_.tensors.push_back(std::move(o));
        }
        const uint32_t source = static_cast<uint32_t>(out_.sources.size());
        out_.sources.push_back(view);
        add_copy(out_.tensors[it->second], source, Shape(view.shape.size(), 0), offsets, view.shape);
    }

private:
    TensorMapping& out_;
    std::map<std::string, size_t> index_;
};

// Every combination of indices on the split axes becomes a view of the chunk, copied into the
// output tensor its key names.
void add_chunk_views(const DcpTensor& t, const DcpChunk& chunk, const TensorRef& ref, const std::vector<AxisSplit>& axes,
                     const Shape& shape, MappingBuilder& mapping) {
    const Shape offsets(chunk.offsets.begin() + static_cast<std::ptrdiff_t>(axes.size()), chunk.offsets.end());
    std::vector<int64_t> idx(axes.size(), 0);
    for (bool more = true; more;) {
        TensorRef view = ref;
        std::string key = axes.empty() ? t.fqn : "";
        for (size_t a = 0; a < axes.size(); ++a) {
            key += axes[a].prefix + std::to_string(chunk.offsets[a] + idx[a]) + axes[a].suffix;
            view = select_dim(view, 0, idx[a]);
        }
        mapping.add_view(key, t.dtype, shape, view, offsets);
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

}  // namespace

TensorMapping assemble_dcp_tensors(const DcpMetadata& meta, const std::vector<ScannedFile>& chunk_scans,
                                   bool split_megatron_axes, SourceLedger* ledger) {
    TensorMapping out;
    MappingBuilder mapping(out);
    Float8ScaleGrids float8;
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
        const std::vector<AxisSplit> axes = split_megatron_axes ? megatron_axis_splits(meta, t) : std::vector<AxisSplit>{};
        // What stays of the shape once the layer/expert axes are split off.
        const Shape shape(t.size.begin() + static_cast<std::ptrdiff_t>(std::min(axes.size(), t.size.size())), t.size.end());
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const ScannedFile& scanned = chunk_scans.at(first_scan + c);
            if (const auto item = float8_chunk(t, t.chunks[c], scanned, split_megatron_axes)) {
                // torchao float8 codes; their scales go to the weight's grid.
                mapping.add_view(t.fqn, DType::F8_E4M3, shape, *item->codes, t.chunks[c].offsets);
                float8.add_chunk(t, t.chunks[c], *item, out.sources);
                continue;
            }
            const TensorRef& ref = chunk_tensor(t, t.chunks[c], scanned, axes.size());
            add_chunk_views(t, t.chunks[c], ref, axes, shape, mapping);
        }
    }
    float8.attach(out, meta.dir + "/.metadata");
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
