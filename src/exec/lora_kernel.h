#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor_mapping.h"

namespace vmerge {

// One LoraDelta in fp32, ready to add to row blocks: W[i, :] += scale · Σ_k left[i, k] · right[k, :].
struct LoraFactors {
    int64_t rank = 0;
    int64_t rows = 0;            // W's rows (out, or vocab for an Embedding)
    int64_t cols = 0;            // W's columns
    std::vector<float> left;     // [rows, rank]
    std::vector<float> right;    // [rank, cols]
    float scale = 0;
};

// From the assembled A and B (fp32, row-major in their stored shapes); an Embedding's factors
// are transposed here once, so every block runs the same loop.
LoraFactors make_lora_factors(const LoraDelta& delta, const float* a, const float* b);

// Adds the update to rows [row_begin, row_end) of W held in `rows` (fp32, row-major, `cols`
// wide), as PEFT and Megatron-Bridge compute it: the product in fp32, times the scale, added
// to the fp32 weight, so the caller rounds to the output dtype once. Rows are shared among
// up to `threads` threads when the block is large enough to be worth it.
void add_lora_delta(float* rows, int64_t row_begin, int64_t row_end, const LoraFactors& factors, int threads = 1);

// The register widths the fold is compiled for. add_lora_delta runs the widest this CPU has (picked
// at run time, so the binary runs on any x86-64 node); every width gives the same bits.
enum class LoraFoldWidth { Baseline, Avx2, Avx512 };

// The widths this CPU runs, widest first (Baseline always, last).
std::vector<LoraFoldWidth> lora_fold_widths();

// add_lora_delta on the calling thread with the given width (one of lora_fold_widths()), so
// tests can compare every width's code bit for bit on one machine.
void add_lora_delta_as(LoraFoldWidth width, float* rows, int64_t row_begin, int64_t row_end, const LoraFactors& factors);

}  // namespace vmerge
