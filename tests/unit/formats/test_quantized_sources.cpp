// formats/hf_safetensors/quantized_sources.h: block-FP8 weights paired with their scales, and
// every one-byte tensor the config does not account for refused by name.
#include <gtest/gtest.h>

#include <string>

#include "core/box_region.h"
#include "core/error.h"
#include "formats/hf_safetensors/quantized_sources.h"

namespace vmerge {
namespace {

// A tensor copied whole from its own source, as map_hf_safetensors maps one.
void add(TensorMapping& m, const std::string& name, DType dtype, Shape shape) {
    TensorRef ref;
    ref.dtype = dtype;
    ref.shape = shape;
    ref.stride = contiguous_strides(shape);
    ref.storage = {"model.safetensors", name, 0, 0, std::nullopt};
    OutputTensor t;
    t.name = name;
    t.source_dtype = t.dtype = dtype;
    t.shape = shape;
    const auto source = static_cast<uint32_t>(m.sources.size());
    m.sources.push_back(ref);
    add_copy(t, source, Shape(shape.size(), 0), Shape(shape.size(), 0), shape);
    m.tensors.push_back(t);
}

SourceQuantization block_fp8() {
    SourceQuantization q;
    q.config_path = "hf/config.json";
    q.quant_method = "fp8";
    q.block_rows = q.block_cols = 128;
    return q;
}

std::string error_of(TensorMapping m, const SourceQuantization& q) {
    try {
        attach_source_scales(m, q);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(QuantizedSources, BlockFp8WeightTakesItsScaleWhichLeavesTheOutput) {
    TensorMapping m;
    add(m, "model.layers.0.mlp.down_proj.weight", DType::F8_E4M3, {130, 256});
    add(m, "model.layers.0.mlp.down_proj.weight_scale_inv", DType::F32, {2, 2});
    add(m, "model.norm.weight", DType::BF16, {130});
    const std::string note = attach_source_scales(m, block_fp8());
    ASSERT_EQ(m.tensors.size(), 2u);
    const OutputTensor& w = m.tensors[0];
    ASSERT_TRUE(w.source_scales.has_value());
    EXPECT_EQ(w.dtype, DType::BF16);
    EXPECT_EQ(w.source_dtype, DType::F8_E4M3);
    const SourceScales& s = m.source_scales.at(*w.source_scales);
    EXPECT_EQ(s.scales.name, "model.layers.0.mlp.down_proj.weight_scale_inv");
    EXPECT_EQ(s.block_rows, 128);
    EXPECT_EQ(m.tensors[1].name, "model.norm.weight");
    EXPECT_NE(note.find("1 block-FP8 weights"), std::string::npos);
    EXPECT_EQ(all_side_inputs(m).size(), 1u);  // the scale is read (and counted as written)
}

TEST(QuantizedSources, Float8WithoutAConfigThatSaysHowIsRefusedByName) {
    TensorMapping m;
    add(m, "model.layers.0.self_attn.q_proj.weight", DType::F8_E4M3, {128, 128});
    SourceQuantization none;
    none.config_path = "hf/config.json";
    const std::string e = error_of(m, none);
    EXPECT_NE(e.find("model.layers.0.self_attn.q_proj.weight: a float8_e4m3fn tensor"), std::string::npos) << e;
    EXPECT_NE(e.find("no quantization_config"), std::string::npos) << e;
}

TEST(QuantizedSources, UnreadSchemeIsRefusedNamingTheTensorAndTheMethod) {
    TensorMapping m;
    add(m, "model.layers.0.mlp.experts.gate_up_proj_blocks", DType::U8, {4, 256, 4, 16});
    add(m, "model.layers.0.mlp.experts.gate_up_proj_scales", DType::U8, {4, 256, 4});
    SourceQuantization q;
    q.config_path = "hf/config.json";
    q.quant_method = "awq";
    const std::string e = error_of(m, q);
    EXPECT_NE(e.find("gate_up_proj_blocks: a uint8 tensor"), std::string::npos) << e;
    EXPECT_NE(e.find("quant_method 'awq'"), std::string::npos) << e;
}

TEST(QuantizedSources, GptOssBlocksBecomeTheTransposedExpertsWithTheirScalesConsumed) {
    TensorMapping m;
    add(m, "model.layers.0.mlp.experts.gate_up_proj_blocks", DType::U8, {4, 128, 2, 16});
    add(m, "model.layers.0.mlp.experts.gate_up_proj_scales", DType::U8, {4, 128, 2});
    add(m, "model.layers.0.mlp.experts.gate_up_proj_bias", DType::BF16, {4, 128});
    SourceQuantization q;
    q.config_path = "hf/config.json";
    q.quant_method = "mxfp4";
    const std::string note = attach_source_scales(m, q);
    ASSERT_EQ(m.tensors.size(), 2u);
    const OutputTensor& w = m.tensors[0];
    EXPECT_EQ(w.name, "model.layers.0.mlp.experts.gate_up_proj");
    EXPECT_EQ(w.shape, (Shape{4, 64, 128}));  // [E, in, out], as transformers writes it
    EXPECT_EQ(w.assembled_shape(), (Shape{4, 128, 2, 16}));
    EXPECT_EQ(w.assembled_row_bytes(), 128u * 32u);
    EXPECT_EQ(w.row_elements(), 64 * 128);
    const SourceScales& s = m.source_scales.at(*w.source_scales);
    EXPECT_TRUE(s.experts_transposed);
    EXPECT_EQ(s.codes, SourceCodes::Mxfp4);
    EXPECT_NE(note.find("1 GPT-OSS MXFP4 expert tensors"), std::string::npos) << note;

    TensorMapping wrong;
    add(wrong, "model.layers.0.mlp.experts.down_proj_blocks", DType::U8, {4, 64, 2, 16});
    add(wrong, "model.layers.0.mlp.experts.down_proj_scales", DType::U8, {4, 64, 4});
    const std::string e = error_of(wrong, q);
    EXPECT_NE(e.find("down_proj_scales: U8 [4, 64, 4], expected U8 [4, 64, 2]"), std::string::npos) << e;
    TensorMapping orphan;
    add(orphan, "model.layers.0.mlp.experts.down_proj_scales", DType::U8, {4, 64, 2});
    EXPECT_NE(error_of(orphan, q).find("GPT-OSS MXFP4 scales whose blocks"), std::string::npos);
}

TEST(QuantizedSources, MissingOrMisshapedScalesAreErrors) {
    TensorMapping no_scale;
    add(no_scale, "model.layers.0.mlp.up_proj.weight", DType::F8_E4M3, {256, 128});
    EXPECT_NE(error_of(no_scale, block_fp8()).find("without its model.layers.0.mlp.up_proj.weight_scale_inv"),
              std::string::npos);

    TensorMapping wrong_grid;
    add(wrong_grid, "model.layers.0.mlp.up_proj.weight", DType::F8_E4M3, {256, 129});
    add(wrong_grid, "model.layers.0.mlp.up_proj.weight_scale_inv", DType::F32, {2, 1});
    const std::string e = error_of(wrong_grid, block_fp8());
    EXPECT_NE(e.find("up_proj.weight_scale_inv: shape [2, 1], expected [2, 2]"), std::string::npos) << e;

    TensorMapping orphan;
    add(orphan, "model.layers.0.mlp.up_proj.weight", DType::BF16, {256, 128});
    add(orphan, "model.layers.0.mlp.up_proj.weight_scale_inv", DType::F32, {2, 1});
    EXPECT_NE(error_of(orphan, block_fp8()).find("whose weight model.layers.0.mlp.up_proj.weight is not float8"),
              std::string::npos);
}

TEST(QuantizedSources, CompressedTensorsFp8ChannelScalesCoverOneRowEach) {
    SourceQuantization q;
    q.config_path = "hf/config.json";
    q.quant_method = "compressed-tensors";
    q.compressed_fp8_strategy = "channel";
    TensorMapping m;
    add(m, "model.layers.0.self_attn.o_proj.weight", DType::F8_E4M3, {128, 256});
    add(m, "model.layers.0.self_attn.o_proj.weight_scale", DType::BF16, {128, 1});
    attach_source_scales(m, q);
    ASSERT_EQ(m.tensors.size(), 1u);
    const SourceScales& s = m.source_scales.at(*m.tensors[0].source_scales);
    EXPECT_EQ(s.block_rows, 1);
    EXPECT_EQ(s.block_cols, 256);

    TensorMapping per_tensor;
    q.compressed_fp8_strategy = "tensor";
    add(per_tensor, "model.layers.0.self_attn.o_proj.weight", DType::F8_E4M3, {128, 256});
    add(per_tensor, "model.layers.0.self_attn.o_proj.weight_scale", DType::F32, {1});
    attach_source_scales(per_tensor, q);
    const SourceScales& t = per_tensor.source_scales.at(*per_tensor.tensors[0].source_scales);
    EXPECT_EQ(t.block_rows, 128);
    EXPECT_EQ(t.block_cols, 256);

    TensorMapping wrong;
    q.compressed_fp8_strategy = "channel";
    add(wrong, "model.layers.0.self_attn.o_proj.weight", DType::F8_E4M3, {128, 256});
    add(wrong, "model.layers.0.self_attn.o_proj.weight_scale", DType::BF16, {1, 128});
    EXPECT_NE(error_of(wrong, q).find("o_proj.weight_scale: shape [1, 128], expected [128, 1]"), std::string::npos);
}

TEST(QuantizedSources, AConfigWithoutQuantizedTensorsChangesNothing) {
    // A model trained in bf16 from an FP8 release keeps the release's quantization_config.
    TensorMapping m;
    add(m, "model.layers.0.mlp.up_proj.weight", DType::BF16, {256, 128});
    EXPECT_EQ(attach_source_scales(m, block_fp8()), "");
    EXPECT_FALSE(m.tensors[0].source_scales.has_value());
}

SourceQuantization compressed_fp4(const std::string& scheme) {
    SourceQuantization q;
    q.config_path = "hf/config.json";
    q.quant_method = "compressed-tensors";
    q.compressed_fp4 = scheme;
    q.fp4_group = scheme == "nvfp4" ? 16 : 32;
    return q;
}

TEST(QuantizedSources, Mxfp4PackedCodesBecomeTheWeightWithTheirScaleConsumed) {
    TensorMapping m;
    add(m, "model.layers.0.mlp.down_proj.weight_packed", DType::U8, {8, 32});
    add(m, "model.layers.0.mlp.down_proj.weight_scale", DType::U8, {8, 2});
    add(m, "model.norm.weight", DType::BF16, {8});
    const std::string note = attach_source_scales(m, compressed_fp4("mxfp4"));
    ASSERT_EQ(m.tensors.size(), 2u);
    const OutputTensor& w = m.tensors[0];
    EXPECT_EQ(w.name, "model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(w.shape, (Shape{8, 64}));
    EXPECT_EQ(w.assembled_shape(), (Shape{8, 32}));
    EXPECT_EQ(w.assembled_row_bytes(), 32u);
    EXPECT_EQ(w.packed_codes_shape, (Shape{8, 32}));
    EXPECT_EQ(w.dtype, DType::BF16);
    const SourceScales& s = m.source_scales.at(*w.source_scales);
    EXPECT_EQ(s.codes, SourceCodes::Mxfp4);
    EXPECT_EQ(s.block_rows, 1);
    EXPECT_EQ(s.block_cols, 32);
    EXPECT_FALSE(s.global_scale.has_value());
    EXPECT_NE(note.find("1 compressed-tensors MXFP4 weights"), std::string::npos) << note;
}

TEST(QuantizedSources, Fp4RefusalsNameTheTensor) {
    const std::string packed = "model.layers.0.mlp.down_proj.weight_packed";
    const std::string scale = "model.layers.0.mlp.down_proj.weight_scale";
    {  // no scale
        TensorMapping m;
        add(m, packed, DType::U8, {8, 32});
        const std::string e = error_of(m, compressed_fp4("mxfp4"));
        EXPECT_NE(e.find(packed + ": MXFP4 codes without their " + scale), std::string::npos) << e;
    }
    {  // an NVFP4 scale grid of MXFP4's dtype
        TensorMapping m;
        add(m, packed, DType::U8, {8, 32});
        add(m, scale, DType::U8, {8, 4});
        const std::string e = error_of(m, compressed_fp4("nvfp4"));
        EXPECT_NE(e.find(scale + ": U8 [8, 4], expected F8_E4M3 [8, 4]"), std::string::npos) << e;
    }
    {  // NVFP4 without its global scale
        TensorMapping m;
        add(m, packed, DType::U8, {8, 32});
        add(m, scale, DType::F8_E4M3, {8, 4});
        const std::string e = error_of(m, compressed_fp4("nvfp4"));
        EXPECT_NE(e.find("without their model.layers.0.mlp.down_proj.weight_global_scale"), std::string::npos) << e;
    }
    {  // a scale without its codes
        TensorMapping m;
        add(m, scale, DType::U8, {8, 2});
        const std::string e = error_of(m, compressed_fp4("mxfp4"));
        EXPECT_NE(e.find(scale + ": a 4-bit float scale whose codes"), std::string::npos) << e;
    }
    {  // codes of a weight whose input size is not a whole number of groups
        TensorMapping m;
        add(m, packed, DType::U8, {8, 24});
        add(m, scale, DType::U8, {8, 1});
        const std::string e = error_of(m, compressed_fp4("mxfp4"));
        EXPECT_NE(e.find(packed + ": 48 input columns, not a multiple of the MXFP4 group of 32"), std::string::npos) << e;
    }
    {  // packed codes under a config that states no 4-bit scheme
        TensorMapping m;
        add(m, packed, DType::U8, {8, 32});
        add(m, scale, DType::U8, {8, 2});
        SourceQuantization q = compressed_fp4("mxfp4");
        q.compressed_fp4.clear();
        const std::string e = error_of(m, q);
        EXPECT_NE(e.find(packed + ": a uint8 tensor"), std::string::npos) << e;
    }
}

}  // namespace
}  // namespace vmerge
