// NVFP4 / MXFP4 sources written in their own scheme (mapping/fp4_passthrough.h, through
// plan_quantization): which fused groups pass through as stored, and which are quantized again.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mapping/fp4_quantization.h"

namespace vmerge {
namespace {

// An NVFP4 source weight [rows, cols] as quantized_sources.cpp leaves it: codes packed two a byte,
// its scales (and global scale of value `global`) beside it.
void add_nvfp4_source(TensorMapping& m, const std::string& module, int64_t rows, int64_t cols, float global) {
    OutputTensor scale;
    scale.name = module + ".weight_scale";
    scale.source_dtype = scale.dtype = DType::F8_E4M3;
    scale.shape = {rows, cols / 16};
    OutputTensor g;
    g.name = module + ".weight_global_scale";
    g.source_dtype = g.dtype = DType::F32;
    g.shape = {1};
    m.source_scales.push_back({scale, 1, 16, SourceCodes::Nvfp4, g, global});
    OutputTensor t;
    t.name = module + ".weight";
    t.source_dtype = DType::U8;
    t.dtype = DType::BF16;
    t.shape = {rows, cols};
    t.packed_codes_shape = {rows, cols / 2};
    t.source_scales = m.source_scales.size() - 1;
    m.tensors.push_back(t);
}

const OutputTensor* find(const TensorMapping& m, const std::string& name) {
    for (const auto& t : m.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

TEST(Fp4PassThrough, SameSchemeWithOneGlobalScalePerFusedGroupIsWrittenAsStored) {
    TensorMapping m;
    for (const char* part : {"q_proj", "k_proj", "v_proj"})
        add_nvfp4_source(m, std::string("model.layers.0.self_attn.") + part, 32, 64, 3.0f);
    add_nvfp4_source(m, "model.layers.0.self_attn.o_proj", 64, 32, 5.0f);
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    const QuantizationPlan plan = plan_quantization(m, spec);
    const OutputTensor* packed = find(m, "model.layers.0.self_attn.k_proj.weight_packed");
    ASSERT_NE(packed, nullptr);
    EXPECT_TRUE(packed->quantized_as_stored);
    EXPECT_EQ(packed->role, OutputTensor::Role::Plain);
    EXPECT_EQ(packed->shape, (Shape{32, 32}));
    EXPECT_EQ(packed->dtype, DType::U8);
    EXPECT_FALSE(packed->source_scales.has_value());
    EXPECT_TRUE(packed->packed_codes_shape.empty());
    const OutputTensor* scale = find(m, "model.layers.0.self_attn.k_proj.weight_scale");
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(scale->dtype, DType::F8_E4M3);
    EXPECT_TRUE(scale->quantized_as_stored);
    ASSERT_NE(find(m, "model.layers.0.self_attn.o_proj.weight_global_scale"), nullptr);
    EXPECT_EQ(m.tensors.size(), 12u);
    ASSERT_FALSE(plan.notes.empty());
    EXPECT_NE(plan.notes[0].find("4 nvfp4 source weights written as stored"), std::string::npos) << plan.notes[0];
}

TEST(Fp4PassThrough, FusedPartsWithDifferentGlobalScalesAreQuantizedAgainWithOneShared) {
    TensorMapping m;
    add_nvfp4_source(m, "model.layers.0.self_attn.q_proj", 32, 64, 3.0f);
    add_nvfp4_source(m, "model.layers.0.self_attn.k_proj", 32, 64, 3.0f);
    add_nvfp4_source(m, "model.layers.0.self_attn.v_proj", 32, 64, 4.0f);
    add_nvfp4_source(m, "model.layers.0.self_attn.o_proj", 64, 32, 5.0f);
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    const QuantizationPlan plan = plan_quantization(m, spec);
    const OutputTensor* q = find(m, "model.layers.0.self_attn.q_proj.weight_packed");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->role, OutputTensor::Role::QuantPacked);  // dequantized, then quantized again
    EXPECT_EQ(q->packed_codes_shape, (Shape{32, 32}));
    EXPECT_EQ(q->global_scale_group.size(), 3u);          // one global scale for q/k/v
    EXPECT_TRUE(find(m, "model.layers.0.self_attn.o_proj.weight_packed")->quantized_as_stored);
    bool said = false;
    for (const auto& note : plan.notes)
        said |= note.find("1 fused groups of nvfp4 source weights whose parts hold different global scales") !=
                std::string::npos && note.find("model.layers.0.self_attn|qkv") != std::string::npos;
    EXPECT_TRUE(said);
}

TEST(Fp4PassThrough, AnotherSchemeOrALoraFoldQuantizesAgain) {
    TensorMapping m;
    add_nvfp4_source(m, "model.layers.0.self_attn.o_proj", 64, 32, 5.0f);
    add_nvfp4_source(m, "model.layers.0.mlp.down_proj", 64, 32, 5.0f);
    m.tensors[1].lora_delta = 0;
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Mxfp4;
    TensorMapping mx = m;
    plan_quantization(mx, spec);
    EXPECT_EQ(find(mx, "model.layers.0.self_attn.o_proj.weight_packed")->role, OutputTensor::Role::QuantPacked);
    spec.scheme = QuantScheme::Nvfp4;
    plan_quantization(m, spec);
    EXPECT_TRUE(find(m, "model.layers.0.self_attn.o_proj.weight_packed")->quantized_as_stored);
    EXPECT_EQ(find(m, "model.layers.0.mlp.down_proj.weight_packed")->role, OutputTensor::Role::QuantPacked);
}

}  // namespace
}  // namespace vmerge
