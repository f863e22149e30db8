#include "fsdp_shard_routing.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/human_units.h"
#include "formats/fsdp/fsdp_backend.h"
#include "formats/fsdp/fsdp_routing.h"
#include "plan/rank_inputs.h"

namespace vmerge {
namespace {


// The part of `box` (a shard's: src_start in the shard, dst_start global) that skeleton copy
// `c` reads (src_start global, dst_start in the output), as a copy from the shard into the
// output; none when they do not meet.
std::optional<BoxCopy> meet(const BoxCopy& box, const BoxCopy& c) {
    BoxCopy out;
    out.source = box.source;
    for (size_t d = 0; d < box.extent.size(); ++d) {
        const int64_t lo = std::max(box.dst_start[d], c.src_start[d]);
        const int64_t hi = std::min(box.dst_start[d] + box.extent[d], c.src_start[d] + c.extent[d]);
        if (hi <= lo) return std::nullopt;
        out.src_start.push_back(box.src_start[d] + lo - box.dst_start[d]);
        out.dst_start.push_back(c.dst_start[d] + lo - c.src_start[d]);
        out.extent.push_back(hi - lo);
    }
    return out;
}

// Each key's skeleton copies, as (output tensor, copy) pairs.
std::vector<std::vector<std::pair<size_t, size_t>>> copies_by_key(const TensorMapping& skeleton, size_t keys) {
    std::vector<std::vector<std::pair<size_t, size_t>>> by_key(keys);
    for (size_t t = 0; t < skeleton.tensors.size(); ++t)
        for (size_t c = 0; c < skeleton.tensors[t].copies.size(); ++c)
            by_key[skeleton_key(skeleton.sources[skeleton.tensors[t].copies[c].source])].emplace_back(t, c);
    return by_key;
}

std::string where_of(const ScannedFile& file, const std::string& key) { return file.path + " key '" + key + "'"; }

// Rows [task.row_begin, task.row_end) of `t`, as a tensor of their own with the copies that
// feed them cut to them: what check_copies_tile_output checks.
OutputTensor rows_of(const OutputTensor& t, const WriteTask& task) {
    OutputTensor rows;
    rows.name = t.name + " rows [" + std::to_string(task.row_begin) + ", " + std::to_string(task.row_end) + ")";
    rows.shape = t.shape;
    if (!rows.shape.empty()) rows.shape[0] = task.row_end - task.row_begin;
    for (const BoxCopy& c : t.copies) {
        if (numel(c.extent) == 0 || !feeds_rows(t, c, task)) continue;
        BoxCopy cut = c;
        if (!rows.shape.empty()) {
            const int64_t lo = std::max(c.dst_start[0], task.row_begin);
            const int64_t hi = std::min(c.dst_start[0] + c.extent[0], task.row_end);
            cut.src_start[0] += lo - c.dst_start[0];
            cut.dst_start[0] = lo - task.row_begin;
            cut.extent[0] = hi - lo;
        }
        rows.copies.push_back(std::move(cut));
    }
    return rows;
}

}  // namespace

StorageReaders fsdp_shard_readers(const std::vector<ScannedFile>& mine, const ScannedFile& first,
                                  const TensorMapping& skeleton, const std::vector<std::vector<WriteTask>>& work) {
    const FsdpKeyIndex keys = fsdp_key_index(first);
    const auto by_key = copies_by_key(skeleton, first.tensors.size());
    std::vector<std::vector<std::pair<int, const WriteTask*>>> tasks_of(skeleton.tensors.size());
    for (size_t r = 0; r < work.size(); ++r)
        for (const WriteTask& task : work[r]) tasks_of[task.tensor].emplace_back(static_cast<int>(r), &task);
    StorageReaders readers;
    for (const ScannedFile& file : mine) {
        for (const StateDictEntry& e : file.tensors) {
            if (numel(e.tensor.shape) == 0) continue;  // an empty shard: read by no one
            std::set<int> ranks;
            const auto boxes = dtensor_shard_boxes(e.tensor, where_of(file, e.key));
            for (const auto& [t, c] : by_key[keys.at(e.key)])
                for (const BoxCopy& box : boxes)
                    if (const auto copy = meet(box, skeleton.tensors[t].copies[c]))
                        for (const auto& [rank, task] : tasks_of[t])
                            if (feeds_rows(skeleton.tensors[t], *copy, *task)) ranks.insert(rank);
            if (!ranks.empty())
                readers[{e.tensor.storage.file, e.tensor.storage.byte_offset}].assign(ranks.begin(), ranks.end());
        }
    }
    return readers;
}

TensorMapping compose_routed_mapping(const TensorMapping& skeleton, const ScannedFile& first,
                                     const std::vector<ScannedFile>& received, const std::vector<WriteTask>& tasks) {
    const FsdpKeyIndex keys = fsdp_key_index(first);
    TensorMapping mapping;
    std::vector<std::vector<uint32_t>> shards_of_key(first.tensors.size());
    std::vector<std::vector<BoxCopy>> boxes;  // per source
    for (const ScannedFile& file : received) {
        for (const StateDictEntry& e : file.tensors) {
            const auto key = keys.find(e.key);
            if (key == keys.end()) throw Error("internal: routed key '" + e.key + "' of " + file.path + " is not file 0's");
            const uint32_t source = static_cast<uint32_t>(mapping.sources.size());
            shards_of_key[key->second].push_back(source);
            boxes.push_back(dtensor_shard_boxes(e.tensor, where_of(file, e.key)));
            for (BoxCopy& box : boxes.back()) box.source = source;
            mapping.sources.push_back(e.tensor);
        }
    }
    for (const OutputTensor& whole : skeleton.tensors) {
        OutputTensor t = whole;
        t.copies.clear();
        for (const BoxCopy& c : whole.copies)
            for (const uint32_t source : shards_of_key[skeleton_key(skeleton.sources[c.source])])
                for (const BoxCopy& box : boxes[source])
                    if (auto copy = meet(box, c)) t.copies.push_back(std::move(*copy));
        mapping.tensors.push_back(std::move(t));
    }
    for (const WriteTask& task : tasks) check_copies_tile_output(rows_of(mapping.tensors[task.tensor], task), mapping.sources);
    return mapping;
}

namespace {

uint64_t shape_bytes(const Shape& shape) { return shape.capacity() * sizeof(int64_t); }

uint64_t source_bytes(const TensorRef& t) {
    uint64_t bytes = sizeof(TensorRef) + shape_bytes(t.shape) + shape_bytes(t.stride) + t.storage.file.capacity() +
                     t.storage.key.capacity();
    if (t.dtensor) {
        const DTensorLayout& d = *t.dtensor;
        bytes += shape_bytes(d.global_shape) + shape_bytes(d.mesh_shape) + shape_bytes(d.coordinates) +
                 d.placements.capacity() * sizeof(Placement);
        for (const std::string& name : d.mesh_dim_names) bytes += sizeof(std::string) + name.capacity();
    }
    return bytes;
}

}  // namespace

MetadataBytes mapping_metadata_bytes(const TensorMapping& mapping) {
    MetadataBytes bytes;
    for (const TensorRef& source : mapping.sources) bytes.share += source_bytes(source);
    for (const OutputTensor& t : mapping.tensors) {
        bytes.whole += sizeof(OutputTensor) + t.name.capacity() + shape_bytes(t.shape);
        for (const BoxCopy& c : t.copies)
            bytes.share += sizeof(BoxCopy) + shape_bytes(c.src_start) + shape_bytes(c.dst_start) + shape_bytes(c.extent);
    }
    return bytes;
}

std::string metadata_over_budget(size_t entries, const MetadataBytes& bytes, uint64_t budget, int ranks) {
    const uint64_t total = bytes.whole + bytes.share;
    if (total <= budget) return "";
    std::string text = "this rank's share of the merge holds " + std::to_string(entries) + " scanned entries, " +
                       human_bytes(total) + " of planning metadata (" + human_bytes(bytes.whole) +
                       " of it the output tensors every rank holds), over its --max-memory budget of " +
                       human_bytes(budget);
    if (bytes.whole >= budget) return text + ": no number of ranks would fit it; raise --max-memory";
    const uint64_t room = budget - bytes.whole;
    const uint64_t fit = (bytes.share * static_cast<uint64_t>(ranks) + room - 1) / room;
    return text + ": about " + std::to_string(fit) + " ranks would fit (a share's metadata shrinks with the number of "
                  "ranks), or raise --max-memory";
}

}  // namespace vmerge
