#include "exec/lora_kernel.h"

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace vmerge {
namespace {

// Rows [begin, end) of W += scale · left·right. Four rows at a time share every load of a
// row of `right` (the product streams `right` once per group of rows, not once per row);
// the inner loops are unit-stride so the compiler vectorises them.
void add_rows(float* rows, int64_t row_begin, int64_t begin, int64_t end, const LoraFactors& f) {
    const int64_t cols = f.cols, r = f.rank;
    constexpr int64_t kGroup = 4;
    std::vector<float> product(static_cast<size_t>(kGroup * cols));
    for (int64_t i = begin; i < end; i += kGroup) {
        const int64_t n = std::min(kGroup, end - i);
        std::fill(product.begin(), product.end(), 0.0f);
        float* p0 = product.data();
        float* p1 = p0 + cols;
        float* p2 = p1 + cols;
        float* p3 = p2 + cols;
        for (int64_t k = 0; k < r; ++k) {
            const float* right = f.right.data() + k * cols;
            const float l0 = f.left[i * r + k];
            const float l1 = n > 1 ? f.left[(i + 1) * r + k] : 0.0f;
            const float l2 = n > 2 ? f.left[(i + 2) * r + k] : 0.0f;
            const float l3 = n > 3 ? f.left[(i + 3) * r + k] : 0.0f;
            for (int64_t j = 0; j < cols; ++j) {
                const float x = right[j];
                p0[j] += l0 * x;
                p1[j] += l1 * x;
                p2[j] += l2 * x;
                p3[j] += l3 * x;
            }
        }
        for (int64_t g = 0; g < n; ++g) {
            float* w = rows + (i + g - row_begin) * cols;
            const float* p = product.data() + g * cols;
            for (int64_t j = 0; j < cols; ++j) w[j] += f.scale * p[j];
        }
    }
}

}  // namespace

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

void add_lora_delta(float* rows, int64_t row_begin, int64_t row_end, const LoraFactors& f, int threads) {
    if (row_begin < 0 || row_end > f.rows || row_begin > row_end)
        throw Error("internal: LoRA rows " + std::to_string(row_begin) + ".." + std::to_string(row_end) + " outside " +
                    std::to_string(f.rows));
    const int64_t count = row_end - row_begin;
    // Threads only where the work pays for starting them (about a million multiply-adds each).
    const int64_t useful = std::max<int64_t>(1, count * f.rank * f.cols / (1 << 20));
    const int64_t n = std::clamp<int64_t>(std::min<int64_t>(threads, useful), 1, std::max<int64_t>(1, count));
    if (n == 1) {
        add_rows(rows, row_begin, row_begin, row_end, f);
        return;
    }
    std::vector<std::thread> pool;
    const int64_t per = (count + n - 1) / n;
    for (int64_t t = 1; t < n; ++t) {
        const int64_t begin = row_begin + t * per, end = std::min(row_end, begin + per);
        if (begin < end) pool.emplace_back(add_rows, rows, row_begin, begin, end, std::cref(f));
    }
    add_rows(rows, row_begin, row_begin, std::min(row_end, row_begin + per), f);
    for (auto& t : pool) t.join();
}

}  // namespace vmerge
