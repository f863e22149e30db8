#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/lora_kernel.h"

// The register-tiled LoRA fold against the plain triple loop, bit for bit: every output element
// must see the same fp32 operations in the same order (product summed from +0 in increasing k,
// multiply then add, then w + scale · product), for every register width this CPU runs, shapes
// that leave partial tiles in both directions, any row range and any thread count.
namespace vmerge {
namespace {

// W[i, :] += scale · Σ_k left[i, k] · right[k, :] for rows [row_begin, row_end) of a [rows, cols]
// product, written as separate statements so no compiler fuses the multiply and the add.
void reference_fold(std::vector<float>& w, int64_t row_begin, int64_t row_end, const std::vector<float>& left,
                    const std::vector<float>& right, int64_t rank, int64_t cols, float scale) {
    for (int64_t i = row_begin; i < row_end; ++i)
        for (int64_t j = 0; j < cols; ++j) {
            float p = 0.0f;
            for (int64_t k = 0; k < rank; ++k) {
                const float term = left[i * rank + k] * right[k * cols + j];
                p = p + term;
            }
            const float delta = scale * p;
            float& to = w[(i - row_begin) * cols + j];
            to = to + delta;
        }
}

std::vector<float> random_floats(size_t n, std::mt19937& g) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(g);
    // Signed zeros and subnormals too: the order of operations decides their bits as well.
    if (n > 3) {
        v[0] = -0.0f;
        v[n / 2] = 1e-40f;
        v[n - 1] = -3e-39f;
    }
    return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string width_name(LoraFoldWidth w) {
    return w == LoraFoldWidth::Avx512 ? "avx512" : w == LoraFoldWidth::Avx2 ? "avx2" : "baseline";
}

LoraFactors random_factors(int64_t rows, int64_t cols, int64_t rank, std::mt19937& g) {
    LoraFactors f;
    f.rows = rows;
    f.cols = cols;
    f.rank = rank;
    f.scale = 0.375f;
    f.left = random_floats(static_cast<size_t>(rows * rank), g);
    f.right = random_floats(static_cast<size_t>(rank * cols), g);
    return f;
}

TEST(LoraFold, EveryWidthMatchesThePlainLoopBitForBit) {
    std::mt19937 g(18);
    const auto widths = lora_fold_widths();
    ASSERT_EQ(widths.back(), LoraFoldWidth::Baseline);
    // Columns around the tile widths (4, 8, 16 lanes; tiles of 2 vectors), rows around the row
    // groups (6 and 8), and ranks 1, 7, 64.
    for (int64_t rows : {1, 5, 6, 7, 8, 9, 13, 17}) {
        for (int64_t cols : {1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 71}) {
            for (int64_t rank : {1, 7, 64}) {
                const LoraFactors f = random_factors(rows, cols, rank, g);
                const std::vector<float> w0 = random_floats(static_cast<size_t>(rows * cols), g);
                std::vector<float> expected = w0;
                reference_fold(expected, 0, rows, f.left, f.right, rank, cols, f.scale);
                for (LoraFoldWidth width : widths) {
                    std::vector<float> w = w0;
                    add_lora_delta_as(width, w.data(), 0, rows, f);
                    EXPECT_TRUE(same_bits(w, expected))
                        << width_name(width) << " rows " << rows << " cols " << cols << " rank " << rank;
                }
            }
        }
    }
}

TEST(LoraFold, RowRangesAndThreadsChangeNoBit) {
    std::mt19937 g(5);
    const LoraFactors f = random_factors(61, 203, 64, g);
    // A block of rows [7, 52) of W: its own buffer, row 0 of which is W's row 7.
    const std::vector<float> w0 = random_floats(static_cast<size_t>(45 * 203), g);
    std::vector<float> expected = w0;
    reference_fold(expected, 7, 52, f.left, f.right, 64, 203, f.scale);
    for (LoraFoldWidth width : lora_fold_widths()) {
        std::vector<float> w = w0;
        add_lora_delta_as(width, w.data(), 7, 52, f);
        EXPECT_TRUE(same_bits(w, expected)) << width_name(width);
    }
    for (int threads : {1, 2, 3, 8}) {
        std::vector<float> w = w0;
        add_lora_delta(w.data(), 7, 52, f, threads);
        EXPECT_TRUE(same_bits(w, expected)) << threads << " threads";
    }
    // Large enough that add_lora_delta does split the rows among threads (a million
    // multiply-adds per thread).
    const LoraFactors big = random_factors(300, 1000, 16, g);
    const std::vector<float> b0 = random_floats(300 * 1000, g);
    std::vector<float> big_expected = b0;
    reference_fold(big_expected, 0, 300, big.left, big.right, 16, 1000, big.scale);
    std::vector<float> b = b0;
    add_lora_delta(b.data(), 0, 300, big, 3);
    EXPECT_TRUE(same_bits(b, big_expected));
    EXPECT_THROW(add_lora_delta_as(LoraFoldWidth::Baseline, b.data(), 290, 301, big), Error);
}

// The factors of a Linear and of an Embedding from A and B as PEFT stores them, against the
// update written from A and B directly.
TEST(LoraFold, LinearAndEmbeddingFactorsFoldLikeBTimesA) {
    std::mt19937 g(64);
    for (bool transposed : {false, true}) {
        const int64_t rank = 7, a_cols = 37, b_rows = 29;
        LoraDelta d;
        d.transposed = transposed;
        d.a.shape = {rank, a_cols};  // lora_A [r, in] (lora_embedding_A [r, vocab])
        d.b.shape = {b_rows, rank};  // lora_B [out, r] (lora_embedding_B [dim, r])
        d.scale = 2.5;
        const std::vector<float> a = random_floats(static_cast<size_t>(rank * a_cols), g);
        const std::vector<float> b = random_floats(static_cast<size_t>(b_rows * rank), g);
        // W is [out, in] = B·A for a Linear, [vocab, dim] = (B·A)ᵀ for an Embedding.
        const int64_t rows = transposed ? a_cols : b_rows, cols = transposed ? b_rows : a_cols;
        const std::vector<float> w0 = random_floats(static_cast<size_t>(rows * cols), g);
        std::vector<float> expected = w0;
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
                float p = 0.0f;
                for (int64_t k = 0; k < rank; ++k) {
                    const float term = transposed ? a[k * a_cols + i] * b[j * rank + k] : b[i * rank + k] * a[k * a_cols + j];
                    p = p + term;
                }
                const float delta = 2.5f * p;
                expected[i * cols + j] = expected[i * cols + j] + delta;
            }
        const LoraFactors f = make_lora_factors(d, a.data(), b.data());
        ASSERT_EQ(f.rows, rows);
        ASSERT_EQ(f.cols, cols);
        for (LoraFoldWidth width : lora_fold_widths()) {
            std::vector<float> w = w0;
            add_lora_delta_as(width, w.data(), 0, rows, f);
            EXPECT_TRUE(same_bits(w, expected)) << width_name(width) << (transposed ? " embedding" : " linear");
        }
    }
}

TEST(LoraKernel, LinearAddsScaledBTimesA) {
    LoraDelta d;
    d.a.shape = {2, 3};  // A [r=2, in=3]
    d.b.shape = {2, 2};  // B [out=2, r=2]
    d.scale = 0.5;
    const float a[] = {1, 2, 3, 4, 5, 6};
    const float b[] = {1, 0, 2, -1};
    const LoraFactors f = make_lora_factors(d, a, b);
    // B·A = [[1, 2, 3], [2-4, 4-5, 6-6]] = [[1, 2, 3], [-2, -1, 0]]; W = 10 everywhere.
    float w[] = {10, 10, 10, 10, 10, 10};
    add_lora_delta(w, 0, 2, f);
    const float expected[] = {10.5f, 11, 11.5f, 9, 9.5f, 10};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(w[i], expected[i]) << i;
    float row1[] = {0, 0, 0};
    add_lora_delta(row1, 1, 2, f);
    EXPECT_EQ(row1[0], -1.0f);
    EXPECT_THROW(add_lora_delta(row1, 1, 3, f), Error);
}

TEST(LoraKernel, EmbeddingAddsTheTransposedProduct) {
    LoraDelta d;
    d.transposed = true;
    d.a.shape = {1, 3};  // lora_embedding_A [r=1, vocab=3]
    d.b.shape = {2, 1};  // lora_embedding_B [dim=2, r=1]
    d.scale = 2;
    const float a[] = {1, 2, 3};
    const float b[] = {10, 100};
    const LoraFactors f = make_lora_factors(d, a, b);
    // (B·A)ᵀ [vocab=3, dim=2] = [[10, 100], [20, 200], [30, 300]], times 2.
    float w[6] = {};
    add_lora_delta(w, 0, 3, f);
    const float expected[] = {20, 200, 40, 400, 60, 600};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(w[i], expected[i]) << i;
}

}  // namespace
}  // namespace vmerge
