#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace vmerge {

struct QuantizedLinear {
    std::string module;
    int64_t rows = 0, cols = 0;  // [out, in]
};

// vLLM's block-FP8 loader rules (docs/reference/fp8-formats.md §2.4; vLLM validate_fp8_block_shape
// and Fp8MoEMethod) that these layers break, one line per rule naming it, how many layers break it
// and one example: fused-parts-128 (every fused part but the last a multiple of 128 rows, at any
// TP), moe-intermediate-128 (expert intermediate size a multiple of 128), and tp-shard-128 (at TP
// 2/4/8 each rank's column-parallel output and row-parallel input a multiple of 128; k/v are left
// out: vLLM replicates KV heads when there are fewer than ranks). Empty when the model loads at TP
// 1, 2, 4 and 8.
std::vector<std::string> block_fp8_shape_warnings(const std::vector<QuantizedLinear>& linears);

}  // namespace vmerge
