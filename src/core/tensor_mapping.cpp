#include "core/tensor_mapping.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/error.h"

namespace vmerge {

void OutputNames::claim(const std::string& name, const std::string& source_key) {
    if (name == "__metadata__")
        throw Error(where_ + ": key '" + source_key + "' becomes the output tensor name '__metadata__', which "
                    "safetensors reserves for its header");
    if (name.empty()) throw Error(where_ + ": key '" + source_key + "' becomes an empty output tensor name");
    auto [it, fresh] = source_of_.emplace(name, source_key);
    if (!fresh)
        throw Error(where_ + ": keys '" + it->second + "' and '" + source_key + "' both become output tensor '" +
                    name + "'");
}

void check_copies_tile_output(const OutputTensor& t, const std::vector<TensorRef>& sources) {
    if (t.role != OutputTensor::Role::Plain && t.role != OutputTensor::Role::QuantPacked) return;
    const Shape shape = t.assembled_shape();
    const size_t rank = shape.size();
    int64_t covered = 0;
    for (const BoxCopy& c : t.copies) {
        if (c.source >= sources.size() || c.src_start.size() != rank ||
            c.dst_start.size() != rank || c.extent.size() != rank)
            throw Error("internal: malformed copy for " + t.name);
        const TensorRef& src = sources[c.source];
        for (size_t d = 0; d < rank; ++d) {
            if (c.extent[d] < 0 || c.dst_start[d] < 0 || c.src_start[d] < 0 ||
                c.dst_start[d] + c.extent[d] > shape[d] ||
                c.src_start[d] + c.extent[d] > src.shape[d])
                throw Error(t.name + ": a shard of " + src.storage.file + " maps outside the tensor (dim " +
                            std::to_string(d) + ")");
        }
        covered += numel(c.extent);
    }
    // Boxes are disjoint by construction when their volumes add up and no two overlap;
    // check overlap pairwise only for the few-box case that every rule produces.
    if (covered != numel(shape) && !(t.zero_fill && covered < numel(shape)))
        throw Error(t.name + ": the shards cover " + std::to_string(covered) + " of " +
                    std::to_string(numel(shape)) + " elements of " + shape_to_string(shape));
    // Fast path, what almost every rule produces (FSDP Shard(0) over thousands of ranks, TP
    // concatenation): every box spans the whole tensor except along one dim. Sorting those
    // slabs by start proves them disjoint in O(n log n).
    if (t.copies.size() > 8 && rank > 0) {
        std::optional<size_t> slab_dim;
        bool slabs = true;
        for (const BoxCopy& c : t.copies) {
            if (numel(c.extent) == 0) continue;
            for (size_t d = 0; d < rank && slabs; ++d) {
                if (c.dst_start[d] == 0 && c.extent[d] == shape[d]) continue;
                if (slab_dim && *slab_dim != d) slabs = false;
                slab_dim = d;
            }
            if (!slabs) break;
        }
        if (slabs) {
            const size_t d = slab_dim.value_or(0);
            std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end) along slab_dim
            runs.reserve(t.copies.size());
            for (const BoxCopy& c : t.copies)
                if (numel(c.extent) > 0) runs.emplace_back(c.dst_start[d], c.dst_start[d] + c.extent[d]);
            std::sort(runs.begin(), runs.end());
            for (size_t i = 1; i < runs.size(); ++i)
                if (runs[i].first < runs[i - 1].second)
                    throw Error(t.name + ": two shards overlap at index " + std::to_string(runs[i].first) +
                                " of dim " + std::to_string(d));
            return;
        }
    }
    if (t.copies.size() <= 4096) {
        for (size_t i = 0; i < t.copies.size(); ++i)
            for (size_t j = i + 1; j < t.copies.size(); ++j) {
                bool overlap = numel(t.copies[i].extent) > 0 && numel(t.copies[j].extent) > 0;
                for (size_t d = 0; d < rank && overlap; ++d) {
                    const auto& a = t.copies[i];
                    const auto& b = t.copies[j];
                    overlap = a.dst_start[d] < b.dst_start[d] + b.extent[d] &&
                              b.dst_start[d] < a.dst_start[d] + a.extent[d];
                }
                if (overlap)
                    throw Error(t.name + ": shards from " + sources[t.copies[i].source].storage.file +
                                " and " + sources[t.copies[j].source].storage.file + " overlap");
            }
    }
}

void append_mapping(TensorMapping& to, const TensorMapping& from) {
    const uint32_t offset = static_cast<uint32_t>(to.sources.size());
    const size_t scales_offset = to.source_scales.size();
    to.sources.insert(to.sources.end(), from.sources.begin(), from.sources.end());
    for (SourceScales s : from.source_scales) {
        for (auto& c : s.scales.copies) c.source += offset;
        if (s.global_scale)
            for (auto& c : s.global_scale->copies) c.source += offset;
        to.source_scales.push_back(std::move(s));
    }
    for (OutputTensor t : from.tensors) {
        for (auto& c : t.copies) c.source += offset;
        if (t.source_scales) *t.source_scales += scales_offset;
        to.tensors.push_back(std::move(t));
    }
}

std::vector<const OutputTensor*> side_inputs(const TensorMapping& mapping, const OutputTensor& t) {
    std::vector<const OutputTensor*> inputs;
    if (t.lora_delta) {
        const LoraDelta& d = mapping.lora_deltas.at(*t.lora_delta);
        inputs.push_back(&d.a);
        inputs.push_back(&d.b);
    }
    if (t.source_scales) inputs.push_back(&mapping.source_scales.at(*t.source_scales).scales);
    return inputs;
}

std::vector<const OutputTensor*> all_side_inputs(const TensorMapping& mapping) {
    std::vector<const OutputTensor*> inputs;
    for (const LoraDelta& d : mapping.lora_deltas) {
        inputs.push_back(&d.a);
        inputs.push_back(&d.b);
    }
    for (const SourceScales& s : mapping.source_scales) inputs.push_back(&s.scales);
    return inputs;
}

}  // namespace vmerge
