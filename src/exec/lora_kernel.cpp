#include "exec/lora_kernel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace vmerge {
namespace {

// fp32 lanes as GCC/clang vector extensions: element-wise + and * on them are the IEEE operations
// of the scalar code, in any width. The helpers below return and take them by value only where
// they are inlined into the one function of their target, so no vector crosses a call (-Wpsabi).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Lanes4 __attribute__((vector_size(16)));   // SSE2 (the x86-64 baseline), NEON
typedef float Lanes8 __attribute__((vector_size(32)));   // AVX2
typedef float Lanes16 __attribute__((vector_size(64)));  // AVX-512

template <typename Lanes>
constexpr int64_t kLanes = sizeof(Lanes) / sizeof(float);

template <typename Lanes>
[[gnu::always_inline]] inline Lanes load(const float* p) {
    Lanes v;
    std::memcpy(&v, p, sizeof v);  // unaligned
    return v;
}

template <typename Lanes>
[[gnu::always_inline]] inline void store(float* p, Lanes v) {
    std::memcpy(p, &v, sizeof v);
}

// One tile, Rows rows × Vecs vectors of columns at `w` (row stride `cols`):
// w[g, j] += scale · p[g, j], p[g, j] = Σ_k left[g, k] · right[k, j] summed from 0 in increasing k,
// each step a multiply then an add (no fused multiply-add: -ffp-contract=off). The Rows·Vecs
// sums stay in registers for the whole k loop, so `right` is read once per tile and the sums
// never go to memory. Every element sees the operations of the plain triple loop in its order,
// whatever the tile, the target or the thread: the result is bit-identical to it.
template <typename Lanes, int Rows, int Vecs>
[[gnu::always_inline]] inline void fold_tile(float* w, const float* left, const float* right, int64_t rank,
                                             int64_t cols, float scale) {
    constexpr int64_t n = kLanes<Lanes>;
    Lanes sum[Rows][Vecs];
    for (int g = 0; g < Rows; ++g)
        for (int v = 0; v < Vecs; ++v) sum[g][v] = Lanes{};
    for (int64_t k = 0; k < rank; ++k) {
        Lanes x[Vecs];
        for (int v = 0; v < Vecs; ++v) x[v] = load<Lanes>(right + k * cols + v * n);
        for (int g = 0; g < Rows; ++g) {
            const float l = left[g * rank + k];  // scalar · vector: a broadcast
            for (int v = 0; v < Vecs; ++v) sum[g][v] = sum[g][v] + l * x[v];
        }
    }
    for (int g = 0; g < Rows; ++g)
        for (int v = 0; v < Vecs; ++v) {
            float* to = w + g * cols + v * n;
            store<Lanes>(to, load<Lanes>(to) + scale * sum[g][v]);
        }
}
#pragma GCC diagnostic pop

// Columns [j, cols) of Rows rows one at a time, the same operations: what the tiles leave over.
template <int Rows>
[[gnu::always_inline]] inline void fold_columns(float* w, const float* left, const float* right, int64_t rank,
                                                int64_t j, int64_t cols, float scale) {
    for (int g = 0; g < Rows; ++g)
        for (int64_t c = j; c < cols; ++c) {
            float p = 0.0f;
            for (int64_t k = 0; k < rank; ++k) p = p + left[g * rank + k] * right[k * cols + c];
            w[g * cols + c] = w[g * cols + c] + scale * p;
        }
}

// Rows rows, columns [j, cols): tiles two vectors wide, then one vector, then the same with
// half as many lanes (down to 4), then single columns.
template <typename Lanes, int Rows>
[[gnu::always_inline]] inline void fold_row_group(float* w, const float* left, const LoraFactors& f, int64_t j = 0) {
    constexpr int64_t n = kLanes<Lanes>;
    const int64_t cols = f.cols, rank = f.rank;
    const float* right = f.right.data();
    for (; j + 2 * n <= cols; j += 2 * n) fold_tile<Lanes, Rows, 2>(w + j, left, right + j, rank, cols, f.scale);
    if (j + n <= cols) {
        fold_tile<Lanes, Rows, 1>(w + j, left, right + j, rank, cols, f.scale);
        j += n;
    }
    if constexpr (n == 16) fold_row_group<Lanes8, Rows>(w, left, f, j);
    else if constexpr (n == 8) fold_row_group<Lanes4, Rows>(w, left, f, j);
    else fold_columns<Rows>(w, left, right, rank, j, cols, f.scale);
}

// A group of `count` ≤ Rows rows (the last group of a range may be short).
template <typename Lanes, int Rows>
[[gnu::always_inline]] inline void fold_short_group(int64_t count, float* w, const float* left, const LoraFactors& f) {
    if (count == Rows) return fold_row_group<Lanes, Rows>(w, left, f);
    if constexpr (Rows > 1) fold_short_group<Lanes, Rows - 1>(count, w, left, f);
}

// Rows [begin, end) of W += scale · left·right, Group rows at a time. Group × 2 vectors of sums
// plus a row of `right`, a broadcast factor and a product fill the target's registers (16 for
// SSE2 and AVX2, 32 for AVX-512).
template <typename Lanes, int Group>
[[gnu::always_inline]] inline void fold_rows(float* rows, int64_t row_begin, int64_t begin, int64_t end,
                                             const LoraFactors& f) {
    for (int64_t i = begin; i < end; i += Group) {
        float* w = rows + (i - row_begin) * f.cols;
        const float* left = f.left.data() + i * f.rank;
        if (end - i >= Group) fold_row_group<Lanes, Group>(w, left, f);
        else fold_short_group<Lanes, Group - 1>(end - i, w, left, f);
    }
}

using FoldRows = void (*)(float*, int64_t, int64_t, int64_t, const LoraFactors&);

void fold_rows_baseline(float* rows, int64_t row_begin, int64_t begin, int64_t end, const LoraFactors& f) {
    fold_rows<Lanes4, 6>(rows, row_begin, begin, end, f);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VMERGE_LORA_X86_WIDTHS 1
__attribute__((target("avx2"))) void fold_rows_avx2(float* rows, int64_t row_begin, int64_t begin, int64_t end,
                                                    const LoraFactors& f) {
    fold_rows<Lanes8, 6>(rows, row_begin, begin, end, f);
}

__attribute__((target("avx512f,avx512vl"))) void fold_rows_avx512(float* rows, int64_t row_begin, int64_t begin,
                                                                  int64_t end, const LoraFactors& f) {
    fold_rows<Lanes16, 8>(rows, row_begin, begin, end, f);
}
#endif

FoldRows fold_rows_for(LoraFoldWidth width) {
    switch (width) {
#ifdef VMERGE_LORA_X86_WIDTHS
        case LoraFoldWidth::Avx512: return fold_rows_avx512;
        case LoraFoldWidth::Avx2: return fold_rows_avx2;
#endif
        default: return fold_rows_baseline;
    }
}

void add_rows(float* rows, int64_t row_begin, int64_t begin, int64_t end, const LoraFactors& f) {
    static const FoldRows fold = fold_rows_for(lora_fold_widths().front());
    fold(rows, row_begin, begin, end, f);
}

void check_rows(int64_t row_begin, int64_t row_end, const LoraFactors& f) {
    if (row_begin < 0 || row_end > f.rows || row_begin > row_end)
        throw Error("internal: LoRA rows " + std::to_string(row_begin) + ".." + std::to_string(row_end) + " outside " +
                    std::to_string(f.rows));
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
    check_rows(row_begin, row_end, f);
    const int64_t count = row_end - row_begin;
    // Threads only where the work pays for starting them (about a million multiply-adds each).
    const int64_t useful = std::max<int64_t>(1, count * f.rank * f.cols / (1 << 20));
    const int64_t n = std::clamp<int64_t>(std::min<int64_t>(threads, useful), 1, std::max<int64_t>(1, count));
    if (n == 1) {
        add_rows(rows, row_begin, row_begin, row_end, f);
        return;
    }
    // The rows go in chunks to whichever thread asks next, not in fixed halves: on a node whose
    // cores are shared (the writer thread, other processes) a descheduled thread then holds up
    // the block by one chunk at most. Chunks are a multiple of every row group (6, 8).
    constexpr int64_t kChunkRows = 48;
    std::atomic<int64_t> next{row_begin};
    auto fold_chunks = [&] {
        for (int64_t begin; (begin = next.fetch_add(kChunkRows)) < row_end;)
            add_rows(rows, row_begin, begin, std::min(row_end, begin + kChunkRows), f);
    };
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < n; ++t) pool.emplace_back(fold_chunks);
    fold_chunks();
    for (auto& t : pool) t.join();
}

std::vector<LoraFoldWidth> lora_fold_widths() {
    std::vector<LoraFoldWidth> widths;
#ifdef VMERGE_LORA_X86_WIDTHS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) widths.push_back(LoraFoldWidth::Avx512);
    if (__builtin_cpu_supports("avx2")) widths.push_back(LoraFoldWidth::Avx2);
#endif
    widths.push_back(LoraFoldWidth::Baseline);
    return widths;
}

void add_lora_delta_as(LoraFoldWidth width, float* rows, int64_t row_begin, int64_t row_end, const LoraFactors& f) {
    check_rows(row_begin, row_end, f);
    const std::vector<LoraFoldWidth> runs = lora_fold_widths();
    if (std::find(runs.begin(), runs.end(), width) == runs.end())
        throw Error("internal: this CPU does not run the LoRA fold's width " + std::to_string(static_cast<int>(width)));
    fold_rows_for(width)(rows, row_begin, row_begin, row_end, f);
}

}  // namespace vmerge
