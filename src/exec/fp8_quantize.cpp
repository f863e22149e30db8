#include "exec/fp8_quantize.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/vector_clones.h"
#include "exec/dtype_cast.h"
#include "exec/finite_weights.h"
#include "exec/float8_e4m3.h"
#include "exec/quantization_scale.h"

namespace vmerge {
namespace {

constexpr int64_t kBlock = 128;
constexpr float kE4m3Max = 448.0f;

inline float round_to_bf16(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    return std::bit_cast<float>(((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16) << 16);
}

// The value rounded to the weight dtype, as a D tensor's arithmetic result is (values are
// finite here: round to nearest even, inline since it runs twice per weight).
inline float round_to(DType dtype, float value) {
    if (dtype == DType::BF16) return round_to_bf16(value);
    if (dtype == DType::F16) return f16_to_f32(f32_to_f16(value));
    return value;
}

// Sum and max of |dequantized - w| over n codes, in float (added to the double totals per
// block). `omp simd` (compiled with -fopenmp-simd: no OpenMP runtime) lets the sum be
// reassociated across vector lanes, which only moves the statistic's last bits; the max is taken
// on the bit patterns, which order as the values for these non-negative finite errors.
inline void accumulate_errors(const uint8_t* q, const float* w, int64_t n, float scale, float& sum, float& max) {
    float total = 0.0f;
    uint32_t top = 0;
#pragma omp simd reduction(+ : total) reduction(max : top)
    for (int64_t c = 0; c < n; ++c) {
        const float err = std::fabs(e4m3fn_finite_to_float(q[c]) * scale - w[c]);
        total += err;
        top = std::max(top, std::bit_cast<uint32_t>(err));
    }
    sum += total;
    max = std::max(max, std::bit_cast<float>(top));
}

void add_errors(QuantError& error, float sum, float max) {
    error.sum += static_cast<double>(sum);
    error.max = std::max(error.max, static_cast<double>(max));
}

// compressed-tensors' codes of n weights with the scale s (stored in D):
// e4m3fn(clamp(round_D(w / s) + 0)). Its quantizer adds the (zero) zero point it registers for
// symmetric schemes too, so a quotient of -0 (a -0.0 weight, or one whose quotient underflows D)
// becomes +0, code 0x00; a tiny negative quotient still rounds to the code -0 (0x80).
[[gnu::always_inline]] inline void encode_rounded_quotients(const float* w, int64_t n, DType dtype, float scale,
                                                           uint8_t* q) {
    if (dtype == DType::BF16) {
        for (int64_t c = 0; c < n; ++c) q[c] = e4m3fn_from_finite_clamped(round_to_bf16(w[c] / scale) + 0.0f);
    } else {
        // F16 quotients may overflow to infinity: the clamp of the checked encoder takes them.
        for (int64_t c = 0; c < n; ++c) q[c] = e4m3fn_from_float_clamped(round_to(dtype, w[c] / scale) + 0.0f);
    }
}

// The column blocks of a stripe are taken a panel at a time: each row's 512 columns are read as one
// contiguous run (a block's 512-byte rows 4 KiB or more apart defeat the hardware prefetcher), and
// the panel's 128 rows (256 KiB) stay in L2 between the maximum and the encoding.
constexpr int64_t kPanelBlocks = 4;

// The blocks [j0, j0 + blocks) of the stripe of rows [r0, r1), their columns [c0, c1) each.
struct Panel {
    int64_t r0, r1, j0, blocks, cols;
    int64_t c0(int64_t b) const { return (j0 + b) * kBlock; }
    int64_t width(int64_t b) const { return std::min(cols, c0(b) + kBlock) - c0(b); }
};

// Each block's amax as its bit pattern (`top`); a non-finite value in the panel (NaN and Inf lie
// above every finite pattern) is refused, naming the stripe's first non-finite value
// (finite_weights.h), as the block-by-block loop named it.
[[gnu::always_inline]] inline void panel_amax_bits(const float* x, const Panel& p, uint32_t* top,
                                                   const std::string& tensor, int64_t first_row) {
    uint32_t any = 0;
    for (int64_t b = 0; b < p.blocks; ++b) top[b] = 0;
    for (int64_t r = p.r0; r < p.r1; ++r)
        for (int64_t b = 0; b < p.blocks; ++b)
            top[b] = std::max(top[b], max_magnitude_bits(x + r * p.cols + p.c0(b), p.width(b)));
    for (int64_t b = 0; b < p.blocks; ++b) any = std::max(any, top[b]);
    if (any >= kNonFiniteMagnitude)
        require_finite(x + p.r0 * p.cols, p.r1 - p.r0, p.cols, p.cols, {tensor, first_row + p.r0, WeightUse::Quantize});
}

}  // namespace

float ceil_to_ue8m0(float s) {
    const uint32_t bits = std::bit_cast<uint32_t>(s);
    const uint32_t exponent = ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u);
    return std::bit_cast<float>(std::clamp(exponent, 1u, 254u) << 23);
}

VMERGE_VECTOR_CLONES void quantize_fp8_blocks(const float* x, int64_t rows, int64_t cols, Fp8ScaleFormat format,
                                              uint8_t* codes, float* scale_inv, QuantError& error,
                                              const std::string& tensor, int64_t first_row) {
    const int64_t block_cols = (cols + kBlock - 1) / kBlock;
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        for (int64_t j0 = 0; j0 < block_cols; j0 += kPanelBlocks) {
            const Panel p{r0, std::min(rows, r0 + kBlock), j0, std::min(kPanelBlocks, block_cols - j0), cols};
            uint32_t top[kPanelBlocks];
            panel_amax_bits(x, p, top, tensor, first_row);
            float scale[kPanelBlocks], inverse[kPanelBlocks], sum[kPanelBlocks] = {}, max[kPanelBlocks] = {};
            for (int64_t b = 0; b < p.blocks; ++b) {
                // DeepGEMM's floor (the binary32 nearest 1e-4) keeps an all-zero block's scale
                // finite and far above float32's underflow (so a UE8M0 scale is a normal power of
                // two too); the stored scale goes through the common rule.
                const float amax = std::max(std::bit_cast<float>(top[b]), 1e-4f);
                const float computed =
                    format == Fp8ScaleFormat::Ue8m0 ? ceil_to_ue8m0(amax / kE4m3Max) : amax / kE4m3Max;
                scale[b] = store_scale(computed, DType::F32,
                                       reinterpret_cast<unsigned char*>(scale_inv + (r0 / kBlock) * block_cols + j0 + b));
                inverse[b] = 1.0f / scale[b];
            }
            for (int64_t r = p.r0; r < p.r1; ++r)
                for (int64_t b = 0; b < p.blocks; ++b) {
                    const float* w = x + r * cols + p.c0(b);
                    uint8_t* q = codes + r * cols + p.c0(b);
                    const int64_t n = p.width(b);
                    for (int64_t c = 0; c < n; ++c) q[c] = e4m3fn_from_finite_clamped(w[c] * inverse[b]);
                    accumulate_errors(q, w, n, scale[b], sum[b], max[b]);
                }
            for (int64_t b = 0; b < p.blocks; ++b) add_errors(error, sum[b], max[b]);
        }
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

VMERGE_VECTOR_CLONES void quantize_fp8_channels(const float* x, int64_t rows, int64_t cols, DType dtype, uint8_t* codes,
                           unsigned char* scales, QuantError& error, const std::string& tensor, int64_t first_row) {
    const size_t scale_size = element_size(dtype);
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        const uint32_t top = max_magnitude_bits(row, cols);
        if (top >= kNonFiniteMagnitude) require_finite(row, 1, cols, cols, {tensor, first_row + r, WeightUse::Quantize});
        // s = round_D(a / 448); zero there (an all-zero row, or one whose a / 448 underflows D) is eps(D).
        const float scale = store_scale(std::bit_cast<float>(top) / kE4m3Max, dtype,
                                        scales + static_cast<size_t>(r) * scale_size);
        uint8_t* q = codes + r * cols;
        encode_rounded_quotients(row, cols, dtype, scale, q);
        float sum = 0.0f, max = 0.0f;
        accumulate_errors(q, row, cols, scale, sum, max);
        add_errors(error, sum, max);
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

VMERGE_VECTOR_CLONES void quantize_fp8_ct_blocks(const float* x, int64_t rows, int64_t cols, DType dtype,
                                                 uint8_t* codes, unsigned char* scales, QuantError& error,
                                                 const std::string& tensor, int64_t first_row) {
    const size_t scale_size = element_size(dtype);
    const int64_t block_cols = (cols + kBlock - 1) / kBlock;
    for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
        for (int64_t j0 = 0; j0 < block_cols; j0 += kPanelBlocks) {
            const Panel p{r0, std::min(rows, r0 + kBlock), j0, std::min(kPanelBlocks, block_cols - j0), cols};
            uint32_t top[kPanelBlocks];
            panel_amax_bits(x, p, top, tensor, first_row);
            float scale[kPanelBlocks], sum[kPanelBlocks] = {}, max[kPanelBlocks] = {};
            for (int64_t b = 0; b < p.blocks; ++b) {
                // s = round_D(a / 448); zero there (an all-zero block, or one whose a / 448
                // underflows D) is eps(D).
                const size_t at = static_cast<size_t>((r0 / kBlock) * block_cols + j0 + b) * scale_size;
                scale[b] = store_scale(std::bit_cast<float>(top[b]) / kE4m3Max, dtype, scales + at);
            }
            for (int64_t r = p.r0; r < p.r1; ++r)
                for (int64_t b = 0; b < p.blocks; ++b) {
                    const int64_t at = r * cols + p.c0(b), n = p.width(b);
                    encode_rounded_quotients(x + at, n, dtype, scale[b], codes + at);
                    accumulate_errors(codes + at, x + at, n, scale[b], sum[b], max[b]);
                }
            for (int64_t b = 0; b < p.blocks; ++b) add_errors(error, sum[b], max[b]);
        }
    }
    error.count += static_cast<uint64_t>(rows * cols);
}

}  // namespace vmerge
