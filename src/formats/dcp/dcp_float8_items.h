#pragma once
// DCP items that hold a torchao Float8Tensor (torch/torchao_float8.h): the .metadata entry states
// the wrapper's dtype and size (e.g. bfloat16 [N, K]); each chunk's item holds float8 codes of the
// chunk's size and a float32 scale per block. The codes are assembled like any chunk; the scales
// of every chunk are assembled into the weight's scale grid (SourceScales), so the weight is
// dequantized as it is written, exactly as the HF FP8 sources are (quantized_sources.h).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor_mapping.h"
#include "torch/dcp_metadata.h"
#include "torch/torchao_float8.h"

namespace vmerge {

// The codes of a chunk's item when it is a torchao Float8Tensor of the size .metadata states for
// the chunk; nothing for any other item. Error naming the chunk when the item disagrees with
// .metadata, or for a float8 item in a Megatron dist_ckpt (`megatron`: its mapping to HF names keeps
// no scale grids).
struct Float8Chunk {
    Float8ItemFacts facts;
    const TensorRef* codes = nullptr;
    const TensorRef* scale = nullptr;
};
std::optional<Float8Chunk> float8_chunk(const DcpTensor& t, const DcpChunk& chunk, const ScannedFile& scanned,
                                        bool megatron);

// Collects the scales of float8 chunks, then pairs each weight with its grid.
class Float8ScaleGrids {
public:
    // The chunk's scale goes to the box of `t`'s grid its chunk offsets name (offsets must be
    // multiples of the block size). `sources`: the mapping's sources, appended to.
    void add_chunk(const DcpTensor& t, const DcpChunk& chunk, const Float8Chunk& item, std::vector<TensorRef>& sources);
    // Gives every float8 weight of `mapping` its scale grid (SourceScales, dequantized to the
    // Float8Tensor's dtype). Error naming the tensor when some chunks are float8 and others not,
    // the chunks disagree on block size or dtype, or the scales do not tile the grid.
    void attach(TensorMapping& mapping, const std::string& metadata_path) const;

private:
    struct Grid {
        OutputTensor scales;
        Float8ItemFacts facts;
        size_t chunks = 0, float8_chunks = 0;
    };
    std::map<std::string, Grid> grids_;  // by DCP fqn
};

}  // namespace vmerge
