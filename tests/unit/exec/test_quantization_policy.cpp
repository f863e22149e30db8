// Unit tests of the one non-finite and tiny-scale policy (docs/quantization.md, "NaN, infinity
// and tiny scales"): every quantizer (int4, int8, block FP8, FP8_DYNAMIC) and the LoRA fold refuse
// NaN, +inf and -inf with the same message naming the tensor, row, column and value; a scale that
// rounds to zero in its dtype becomes that dtype's eps. Expected codes and scales are worked out
// by hand in the comments (fp16 subnormals are multiples of 2^-24; eps(fp16) = 2^-10).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/copy_executor.h"
#include "exec/float_memory_source.h"
#include "exec/dtype_cast.h"
#include "exec/finite_weights.h"
#include "exec/fp8_quantize.h"
#include "exec/int_quantize.h"
#include "exec/source_reader.h"
#include "mapping/quantization.h"

namespace vmerge {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
const std::string kWeight = "model.layers.0.mlp.down_proj.weight";

std::string quantize_refusal(int64_t row, int64_t column, const std::string& value) {
    return kWeight + ": row " + std::to_string(row) + ", column " + std::to_string(column) + " is " + value +
           "; a weight must be finite to be quantized (no scale represents it); merge without --quantize to keep the "
           "weights as they are, or leave the module out with --quantize_ignore model.layers.0.mlp.down_proj";
}

template <typename Call>
std::string error_of(const Call& call) {
    try {
        call();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

QuantizeSpec int_spec(int bits, bool symmetric = true) {
    QuantizeSpec spec;
    spec.bits = bits;
    spec.group_size = 0;  // one group per row
    spec.symmetric = symmetric;
    return spec;
}

// quantize_rows on 2 x 4 values whose first row is row 10 of the weight, fp16 scales.
std::string int_refusal(int bits, const std::vector<float>& x) {
    uint32_t packed[2];
    uint16_t scales[2];
    int32_t zeros[2];
    QuantError error;
    return error_of([&] {
        quantize_rows(x.data(), 2, 4, int_spec(bits), DType::F16, packed, reinterpret_cast<unsigned char*>(scales),
                      zeros, error, kWeight, 10);
    });
}

TEST(NonFinitePolicy, Int4AndInt8RefuseNanAndInfinitiesNamingRowColumnAndValue) {
    EXPECT_EQ(int_refusal(4, {0.5f, 1.0f, -1.0f, 0.0f, 0.25f, 0.5f, kNan, 1.0f}), quantize_refusal(11, 2, "nan"));
    EXPECT_EQ(int_refusal(4, {kInf, 1.0f, -1.0f, 0.0f, 0.25f, 0.5f, 0.0f, 1.0f}), quantize_refusal(10, 0, "inf"));
    EXPECT_EQ(int_refusal(8, {0.5f, 1.0f, -1.0f, 0.0f, 0.25f, 0.5f, 1.0f, -kInf}), quantize_refusal(11, 3, "-inf"));
    EXPECT_EQ(int_refusal(8, {0.5f, kNan, -1.0f, 0.0f, 0.25f, 0.5f, 1.0f, kInf}), quantize_refusal(10, 1, "nan"));
    EXPECT_EQ(int_refusal(8, {0.5f, 1.0f, -1.0f, 0.0f, 0.25f, 0.5f, 1.0f, 2.0f}), "(no error)");
}

TEST(NonFinitePolicy, BlockFp8RefusesNanAndInfinitiesNamingRowColumnAndValue) {
    // 2 x 130: two column blocks; the message names the first non-finite value of the 128-row
    // stripe in row-major order, counted from row 128.
    auto refusal = [](int64_t row, int64_t col, float value) {
        std::vector<float> x(2 * 130, 0.5f);
        x[static_cast<size_t>(row * 130 + col)] = value;
        std::vector<uint8_t> codes(x.size());
        float scales[2];
        QuantError error;
        return error_of([&] { quantize_fp8_blocks(x.data(), 2, 130, Fp8ScaleFormat::Float, codes.data(), scales, error, kWeight, 128); });
    };
    EXPECT_EQ(refusal(1, 129, kNan), quantize_refusal(129, 129, "nan"));
    EXPECT_EQ(refusal(0, 5, kInf), quantize_refusal(128, 5, "inf"));
    EXPECT_EQ(refusal(1, 0, -kInf), quantize_refusal(129, 0, "-inf"));
}

TEST(NonFinitePolicy, CtBlockFp8RefusesNanAndInfinitiesNamingRowColumnAndValue) {
    // 130 x 128 from row 128 on: the second stripe (rows 256, 257) holds the value.
    auto refusal = [](int64_t row, int64_t col, float value) {
        std::vector<float> x(130 * 128, 0.5f);
        x[static_cast<size_t>(row * 128 + col)] = value;
        std::vector<uint8_t> codes(x.size());
        uint16_t scales[2];
        QuantError error;
        return error_of([&] {
            quantize_fp8_ct_blocks(x.data(), 130, 128, DType::BF16, codes.data(),
                                   reinterpret_cast<unsigned char*>(scales), error, kWeight, 128);
        });
    };
    EXPECT_EQ(refusal(129, 127, kNan), quantize_refusal(257, 127, "nan"));
    EXPECT_EQ(refusal(3, 0, -kInf), quantize_refusal(131, 0, "-inf"));
}

TEST(NonFinitePolicy, ChannelFp8RefusesNanAndInfinitiesNamingRowColumnAndValue) {
    auto refusal = [](int64_t row, int64_t col, float value) {
        std::vector<float> x(3 * 4, -0.25f);
        x[static_cast<size_t>(row * 4 + col)] = value;
        std::vector<uint8_t> codes(x.size());
        uint16_t scales[3];
        QuantError error;
        return error_of([&] {
            quantize_fp8_channels(x.data(), 3, 4, DType::BF16, codes.data(), reinterpret_cast<unsigned char*>(scales),
                                  error, kWeight, 7);
        });
    };
    EXPECT_EQ(refusal(2, 3, kNan), quantize_refusal(9, 3, "nan"));
    EXPECT_EQ(refusal(0, 1, kInf), quantize_refusal(7, 1, "inf"));
    EXPECT_EQ(refusal(1, 2, -kInf), quantize_refusal(8, 2, "-inf"));
}

TEST(NonFinitePolicy, TheQuantizerMessageNamesTheWeightNotItsPackedTensor) {
    EXPECT_EQ(quantized_weight_name("model.layers.0.mlp.down_proj.weight_packed"), kWeight);
    EXPECT_EQ(quantized_weight_name(kWeight), kWeight);
}

float f16_value(uint16_t bits) { return f16_to_f32(bits); }

// A per-channel int4 row of fp16 subnormals whose scale amax / 7.5 underflows fp16:
// amax = 3·2^-24, 3/7.5 = 0.4 of the smallest subnormal, which rounds to 0 -> eps(fp16) = 2^-10
// (bits 0x1400). Every x / 2^-10 is below 2^-11, so every code is 0 (u = 8: nibbles 0x8888), and
// each value dequantizes to 0, within eps/2 of itself.
TEST(TinyScalePolicy, Int4ScaleThatUnderflowsFp16BecomesEps) {
    const float u = std::ldexp(1.0f, -24);
    const float x[4] = {3 * u, -u, 2 * u, 0.0f};
    uint32_t packed = 0xFFFFFFFFu;
    uint16_t scale = 0;
    int32_t zero = 1;
    QuantError error;
    quantize_rows(x, 1, 4, int_spec(4), DType::F16, &packed, reinterpret_cast<unsigned char*>(&scale), &zero, error,
                  kWeight, 0);
    EXPECT_EQ(scale, 0x1400);
    EXPECT_EQ(packed, 0x00008888u);
    EXPECT_EQ(zero, 0);
    EXPECT_EQ(error.max, static_cast<double>(3 * u));
    EXPECT_LE(error.max, f16_value(scale) / 2);
    // int8 likewise: 3·2^-24 / 127.5 rounds to 0 in fp16.
    quantize_rows(x, 1, 4, int_spec(8), DType::F16, &packed, reinterpret_cast<unsigned char*>(&scale), &zero, error,
                  kWeight, 0);
    EXPECT_EQ(scale, 0x1400);
    EXPECT_EQ(packed, 0x80808080u);  // q = 0 -> u = 128 in each byte
}

// A row of larger fp16 subnormals keeps its own (subnormal, non-zero) scale: amax = 1000·2^-24,
// 1000 / 7.5 = 133.33 -> 133·2^-24 (bits 0x0085). Codes: 1000/133 = 7.52 -> 8, clamped to 7;
// -500/133 = -3.76 -> -4; 250/133 = 1.88 -> 2; 7/133 = 0.05 -> 0; u = 15, 4, 10, 8 -> 0x8A4F.
// Dequantized: 931, -532, 266, 0 (·2^-24): within s/2 = 66.5 except the clamped extreme, off
// by amax - qmax·s = 1000 - 931 = 69 (the scale rounded down by a third of a subnormal step).
TEST(TinyScalePolicy, Int4RowOfFp16SubnormalsGetsANonZeroScaleAndDequantizesWithinTheBound) {
    const float u = std::ldexp(1.0f, -24);
    const float x[4] = {1000 * u, -500 * u, 250 * u, 7 * u};
    uint32_t packed = 0;
    uint16_t scale = 0;
    int32_t zero = 1;
    QuantError error;
    quantize_rows(x, 1, 4, int_spec(4), DType::F16, &packed, reinterpret_cast<unsigned char*>(&scale), &zero, error,
                  kWeight, 0);
    EXPECT_EQ(scale, 0x0085);
    EXPECT_EQ(packed, 0x00008A4Fu);
    const float s = f16_value(scale);
    EXPECT_EQ(s, 133 * u);
    const int q[4] = {7, -4, 2, 0};
    for (int k = 1; k < 4; ++k) EXPECT_LE(std::fabs(q[k] * s - x[k]), s / 2) << k;
    EXPECT_EQ(error.max, static_cast<double>(69 * u));  // 1000 - 7·133
}

// All-zero rows keep their defined behaviour: symmetric, scale eps and codes 0 (u = 8);
// asymmetric, scale eps, zero point qmin = -8 (not 0/0) and codes -8 (u = 0): dequantized 0.
TEST(TinyScalePolicy, AllZeroRowsGetEpsAndCodesThatDequantizeToZero) {
    const float x[4] = {0.0f, 0.0f, -0.0f, 0.0f};
    uint32_t packed = 0;
    uint16_t scale = 0;
    int32_t zero = 1;
    QuantError error;
    quantize_rows(x, 1, 4, int_spec(4), DType::BF16, &packed, reinterpret_cast<unsigned char*>(&scale), &zero, error,
                  kWeight, 0);
    EXPECT_EQ(scale, 0x3C00);  // bf16 2^-7
    EXPECT_EQ(packed, 0x00008888u);
    EXPECT_EQ(zero, 0);
    quantize_rows(x, 1, 4, int_spec(4, false), DType::F16, &packed, reinterpret_cast<unsigned char*>(&scale), &zero,
                  error, kWeight, 0);
    EXPECT_EQ(scale, 0x1400);
    EXPECT_EQ(zero, -8);
    EXPECT_EQ(packed, 0x00000000u);
    EXPECT_EQ(error.max, 0.0);
}

// FP8_DYNAMIC in fp16: amax = 3·2^-24, 3·2^-24 / 448 rounds to 0 -> eps 2^-10 (0x1400); the
// quotients 3·2^-14 and less are below half e4m3's smallest step 2^-9: codes 0. A row of larger
// subnormals keeps its own scale: 1000·2^-24 / 448 = 2.23·2^-24 -> 2·2^-24 (0x0002); 1000/2 = 500
// clamps to 448 (0x7E).
TEST(TinyScalePolicy, Fp8DynamicScaleThatUnderflowsFp16BecomesEps) {
    const float u = std::ldexp(1.0f, -24);
    const float x[6] = {3 * u, u, 0.0f, 1000 * u, 0.0f, 0.0f};
    uint8_t codes[6];
    uint16_t scales[2];
    QuantError error;
    quantize_fp8_channels(x, 2, 3, DType::F16, codes, reinterpret_cast<unsigned char*>(scales), error, kWeight, 0);
    EXPECT_EQ(scales[0], 0x1400);
    EXPECT_EQ(codes[0], 0x00);
    EXPECT_EQ(codes[1], 0x00);
    EXPECT_EQ(scales[1], 0x0002);
    EXPECT_EQ(codes[3], 0x7E);
}

// ---------------------------------------------------------------------------------------------
// The LoRA fold, through the executor: W [3, 4] (source 0) += 2 · B [3, 2] (source 2) · A [2, 4]
// (source 1), fp32 sources in memory.
// ---------------------------------------------------------------------------------------------

using MemorySource = testing::FloatMemorySource;

OutputTensor whole_f32(const std::string& name, uint32_t source, const Shape& shape) {
    OutputTensor t;
    t.name = name;
    t.source_dtype = t.dtype = DType::F32;
    t.shape = shape;
    t.copies.push_back({source, {0, 0}, {0, 0}, shape});
    return t;
}

const std::string kBase = "model.layers.0.self_attn.q_proj.weight";
const std::string kA = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight";
const std::string kB = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight";

struct FoldCase {
    std::vector<float> w = std::vector<float>(12, 0.5f);
    std::vector<float> a = {1, 0, 0, 1, 0, 1, 1, 0};
    std::vector<float> b = {1, 0, 0, 1, 1, 1};

    TensorMapping mapping() const {
        TensorMapping m;
        for (const Shape& shape : {Shape{3, 4}, Shape{2, 4}, Shape{3, 2}}) {
            TensorRef source;
            source.dtype = DType::F32;
            source.shape = shape;
            source.stride = contiguous_strides(shape);
            source.storage.file = "memory:" + std::to_string(m.sources.size());
            source.storage.byte_size = source.nbytes();
            m.sources.push_back(source);
        }
        OutputTensor w = whole_f32(kBase, 0, {3, 4});
        w.lora_delta = 0;
        m.tensors.push_back(w);
        LoraDelta d;
        d.a = whole_f32(kA, 1, {2, 4});
        d.b = whole_f32(kB, 2, {3, 2});
        d.scale = 2.0;
        m.lora_deltas.push_back(d);
        return m;
    }

    // "(no error)" with the merged weight in `merged`, or the Error's message; with `quantize`
    // the merged weight is quantized (and not kept).
    std::string run(std::vector<float>& merged, const QuantizeSpec* quantize = nullptr) const {
        TensorMapping m = mapping();
        if (quantize) plan_quantization(m, *quantize);
        CopyExecutor executor(m, 1 << 20, quantize);
        executor.read_sources_with([this](const std::string& file) -> std::unique_ptr<SourceReader> {
            return std::make_unique<MemorySource>(file == "memory:0" ? w : file == "memory:1" ? a : b);
        });
        merged.assign(12, -1.0f);
        return error_of([&] {
            executor.run({{0, 0, 3}}, [&](const RowBlock& block) {
                if (block.tensor == 0 && !quantize) std::memcpy(merged.data() + block.row_begin * 4, block.data, block.size);
            });
        });
    }
};

std::string fold_refusal(const std::string& tensor, int64_t row, int64_t column, const std::string& value,
                         WeightUse use) {
    const std::string why =
        use == WeightUse::LoraFactor
            ? "a LoRA factor must be finite to be folded (B·A would carry it into whole rows of the merged weight); "
              "merge with --extract_lora to write the adapter apart, as it is"
        : use == WeightUse::LoraBase
            ? "a weight must be finite to have a LoRA update folded into it; merge with --extract_lora to write the "
              "base model and the adapter apart, as they are"
            : "the LoRA fold W + scale·B·A overflows float32 there, although W, A and B are finite; merge with "
              "--extract_lora to write the base model and the adapter apart, as they are";
    return tensor + ": row " + std::to_string(row) + ", column " + std::to_string(column) + " is " + value + "; " + why;
}

TEST(NonFinitePolicy, TheFoldOfFiniteFactorsIsWPlusScaleBA) {
    // Row 2 of B·A = A row 0 + A row 1 = {1, 1, 1, 1}; W + 2·(B·A) = 0.5 + 2·{...}.
    std::vector<float> merged;
    ASSERT_EQ(FoldCase{}.run(merged), "(no error)");
    EXPECT_EQ(merged, (std::vector<float>{2.5f, 0.5f, 0.5f, 2.5f, 0.5f, 2.5f, 2.5f, 0.5f, 2.5f, 2.5f, 2.5f, 2.5f}));
}

TEST(NonFinitePolicy, TheFoldRefusesNanAndInfinitiesInBAAndTheBase) {
    std::vector<float> merged;
    FoldCase nan_b;
    nan_b.b[5] = kNan;  // B [3, 2]: row 2, column 1
    EXPECT_EQ(nan_b.run(merged), fold_refusal(kB, 2, 1, "nan", WeightUse::LoraFactor));
    FoldCase inf_a;
    inf_a.a[6] = kInf;  // A [2, 4]: row 1, column 2
    EXPECT_EQ(inf_a.run(merged), fold_refusal(kA, 1, 2, "inf", WeightUse::LoraFactor));
    FoldCase minus_inf_b;
    minus_inf_b.b[0] = -kInf;
    EXPECT_EQ(minus_inf_b.run(merged), fold_refusal(kB, 0, 0, "-inf", WeightUse::LoraFactor));
    FoldCase nan_w;
    nan_w.w[7] = kNan;  // W [3, 4]: row 1, column 3
    EXPECT_EQ(nan_w.run(merged), fold_refusal(kBase, 1, 3, "nan", WeightUse::LoraBase));
    FoldCase inf_w;
    inf_w.w[8] = -kInf;
    EXPECT_EQ(inf_w.run(merged), fold_refusal(kBase, 2, 0, "-inf", WeightUse::LoraBase));
    // Finite W, A and B whose sum overflows: 3e38 + 2·(1·3e38) = inf at row 0, column 0.
    FoldCase overflow;
    overflow.w[0] = 3e38f;
    overflow.a[0] = 3e38f;
    EXPECT_EQ(overflow.run(merged), fold_refusal(kBase, 0, 0, "inf", WeightUse::LoraResult));
}

TEST(NonFinitePolicy, TheFoldBeforeQuantizingRefusesTheSameWay) {
    QuantizeSpec spec = int_spec(8);
    std::vector<float> merged;
    FoldCase nan_b;
    nan_b.b[3] = kNan;
    EXPECT_EQ(nan_b.run(merged, &spec), fold_refusal(kB, 1, 1, "nan", WeightUse::LoraFactor));
    FoldCase finite;
    EXPECT_EQ(finite.run(merged, &spec), "(no error)");
}

TEST(NonFinitePolicy, TheExecutorNamesTheWeightOfAPackedTensor) {
    // No LoRA: the quantizer itself refuses, naming q_proj.weight (not weight_packed).
    FoldCase c;
    c.w[9] = kInf;  // row 2, column 1
    TensorMapping m = c.mapping();
    m.tensors[0].lora_delta.reset();
    m.lora_deltas.clear();
    const QuantizeSpec spec = int_spec(4);
    plan_quantization(m, spec);
    ASSERT_EQ(m.tensors[0].name, "model.layers.0.self_attn.q_proj.weight_packed");
    CopyExecutor executor(m, 1 << 20, &spec);
    executor.read_sources_with(
        [&c](const std::string&) -> std::unique_ptr<SourceReader> { return std::make_unique<MemorySource>(c.w); });
    EXPECT_EQ(error_of([&] { executor.run({{0, 0, 3}}, [](const RowBlock&) {}); }),
              kBase + ": row 2, column 1 is inf; a weight must be finite to be quantized (no scale represents it); "
                      "merge without --quantize to keep the weights as they are, or leave the module out with "
                      "--quantize_ignore model.layers.0.self_attn.q_proj");
}

}  // namespace
}  // namespace vmerge
