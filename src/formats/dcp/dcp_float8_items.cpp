#include "formats/dcp/dcp_float8_items.h"

#include "core/box_region.h"
#include "core/error.h"

namespace vmerge {
namespace {

std::string chunk_where(const DcpTensor& t, const DcpChunk& chunk) {
    return chunk.file + " at byte " + std::to_string(chunk.offset) + " ('" + t.fqn + "' chunk " +
           shape_to_string(chunk.offsets) + ")";
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::optional<Float8Chunk> float8_chunk(const DcpTensor& t, const DcpChunk& chunk, const ScannedFile& scanned,
                                        bool megatron) {
    const std::string where = chunk_where(t, chunk);
    auto facts = parse_float8_item_metadata(scanned.metadata, where);
    if (!facts) return std::nullopt;
    if (scanned.tensors.size() != 2 || scanned.tensors[0].key != kFloat8CodesKey || scanned.tensors[1].key != kFloat8ScaleKey)
        throw Error(where + ": a " + facts->subclass + " item without its qdata and scale");
    if (facts->dtype != t.dtype || facts->shape != chunk.sizes)
        throw Error(where + ": holds a " + facts->subclass + " of " + std::string(torch_name(facts->dtype)) + " " +
                    shape_to_string(facts->shape) + ", the metadata says " + std::string(torch_name(t.dtype)) + " " +
                    shape_to_string(chunk.sizes));
    if (megatron)
        throw Error(where + ": a " + facts->subclass +
                    " in a Megatron dist_ckpt; vmerge reads torchao float8 items in plain DCP saves only");
    if (t.size.size() != 2)
        throw Error(where + ": a " + facts->subclass + " of " + std::to_string(t.size.size()) +
                    " dimensions; vmerge dequantizes 2-D float8 weights [out, in] only");
    return Float8Chunk{*facts, &scanned.tensors[0].tensor, &scanned.tensors[1].tensor};
}

void Float8ScaleGrids::add_chunk(const DcpTensor& t, const DcpChunk& chunk, const Float8Chunk& item,
                                 std::vector<TensorRef>& sources) {
    const std::string where = chunk_where(t, chunk);
    const Shape& block = item.facts.block_size;
    auto [it, fresh] = grids_.try_emplace(t.fqn);
    Grid& grid = it->second;
    if (fresh) {
        grid.facts = item.facts;
        grid.facts.shape = t.size;
        grid.scales.name = t.fqn + "." + kFloat8ScaleKey;
        grid.scales.source_dtype = grid.scales.dtype = item.scale->dtype;
        grid.scales.shape = {ceil_div(t.size[0], block[0]), ceil_div(t.size[1], block[1])};
        grid.chunks = t.chunks.size();
    } else if (block != grid.facts.block_size || item.scale->dtype != grid.scales.source_dtype) {
        throw Error(where + ": scales in blocks of " + shape_to_string(block) + " (" +
                    std::string(torch_name(item.scale->dtype)) + "), another chunk of '" + t.fqn + "' has blocks of " +
                    shape_to_string(grid.facts.block_size) + " (" + std::string(torch_name(grid.scales.source_dtype)) +
                    "): one weight must have one scale grid");
    }
    Shape grid_offsets(2);
    for (size_t d = 0; d < 2; ++d) {
        // A block straddling two chunks would have two scales: the chunks must split at block edges.
        if (chunk.offsets[d] % block[d] != 0 ||
            (chunk.offsets[d] + chunk.sizes[d] != t.size[d] && chunk.sizes[d] % block[d] != 0))
            throw Error(where + ": a chunk of size " + shape_to_string(chunk.sizes) + " that splits a scale block of " +
                        shape_to_string(block) + "; its scales cannot be placed in one grid");
        grid_offsets[d] = chunk.offsets[d] / block[d];
    }
    const uint32_t source = static_cast<uint32_t>(sources.size());
    sources.push_back(*item.scale);
    add_copy(grid.scales, source, Shape(2, 0), grid_offsets, item.scale->shape);
    ++grid.float8_chunks;
}

void Float8ScaleGrids::attach(TensorMapping& mapping, const std::string& metadata_path) const {
    for (auto& [fqn, grid] : grids_) {
        if (grid.float8_chunks != grid.chunks)
            throw Error(metadata_path + ": '" + fqn + "': " + std::to_string(grid.float8_chunks) + " of its " +
                        std::to_string(grid.chunks) + " chunks hold a " + grid.facts.subclass +
                        " and the others plain tensors; expected all or none");
        try {
            check_copies_tile_output(grid.scales, mapping.sources);
        } catch (const Error& e) {
            throw Error(metadata_path + ": " + e.what() + " (the chunks' scales do not tile the weight's scale grid)");
        }
        OutputTensor* weight = nullptr;
        for (auto& t : mapping.tensors)
            if (t.name == fqn) weight = &t;
        if (!weight) throw Error("internal: float8 weight '" + fqn + "' is not in the mapping");
        mapping.source_scales.push_back(SourceScales::block_grid(grid.scales, grid.facts.block_size[0], grid.facts.block_size[1]));
        weight->source_scales = mapping.source_scales.size() - 1;
        weight->dtype = grid.facts.dtype;
    }
}

}  // namespace vmerge
