#include "vmerge/lora_kernel.h"

#include <algorithm>

#include "vmerge/error.h"

namespace vmerge {

LoraFactors make_lora_factors(const LoraDelta& delta, const float* a, const float* b) {
    LoraFactors f;
    f.scale = static_cast<float>(delta.scale);
    const int64_t r = delta.a.shape[0], a_cols = delta.a.shape[1], b_rows = delta.b.shape[0];
    f.rank = r;
    if (!delta.transposed) {
        // Linear: left = B [out, r], right = A [r, in].
        f.rows = b_rows;
        f.cols = a_cols;
        f.left.assign(b, b + b_rows * r);
        f.right.assign(a, a + r * a_cols);
        return f;
    }
    // Embedding: (B·A)ᵀ = Aᵀ·Bᵀ, left = Aᵀ [vocab, r], right = Bᵀ [r, dim].
    f.rows = a_cols;
    f.cols = b_rows;
    f.left.resize(static_cast<size_t>(a_cols * r));
    f.right.resize(static_cast<size_t>(r * b_rows));
    for (int64_t k = 0; k < r; ++k) {
        for (int64_t v = 0; v < a_cols; ++v) f.left[v * r + k] = a[k * a_cols + v];
        for (int64_t d = 0; d < b_rows; ++d) f.right[k * b_rows + d] = b[d * r + k];
    }
    return f;
}

void add_lora_delta(float* rows, int64_t row_begin, int64_t row_end, const LoraFactors& f) {
    if (row_begin < 0 || row_end > f.rows || row_begin > row_end)
        throw Error("internal: LoRA rows " + std::to_string(row_begin) + ".." + std::to_string(row_end) + " outside " +
                    std::to_string(f.rows));
    const int64_t cols = f.cols, r = f.rank;
    std::vector<float> product(static_cast<size_t>(cols));
    for (int64_t i = row_begin; i < row_end; ++i) {
        std::fill(product.begin(), product.end(), 0.0f);
        const float* left = f.left.data() + i * r;
        // Row i of B·A as a sum of A's rows: unit-stride inner loops the compiler vectorises.
        for (int64_t k = 0; k < r; ++k) {
            const float l = left[k];
            if (l == 0.0f) continue;
            const float* right = f.right.data() + k * cols;
            for (int64_t j = 0; j < cols; ++j) product[j] += l * right[j];
        }
        float* w = rows + (i - row_begin) * cols;
        for (int64_t j = 0; j < cols; ++j) w[j] += f.scale * product[j];
    }
}

}  // namespace vmerge
