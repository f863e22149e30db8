// NVFP4 / MXFP4 planning (mapping/fp4_quantization.h): which modules, which tensors, the global
// scale groups, the config block.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "mapping/fp4_quantization.h"

namespace vmerge {
namespace {

OutputTensor weight(const std::string& name, Shape shape, DType dtype = DType::BF16) {
    OutputTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = t.source_dtype = dtype;
    return t;
}

size_t index_of(const TensorMapping& m, const std::string& name) {
    for (size_t i = 0; i < m.tensors.size(); ++i)
        if (m.tensors[i].name == name) return i;
    ADD_FAILURE() << "no tensor " << name;
    return 0;
}

bool has(const TensorMapping& m, const std::string& name) {
    for (const auto& t : m.tensors)
        if (t.name == name) return true;
    return false;
}

bool listed(const QuantizationPlan& plan, const std::string& module) {
    return std::find(plan.ignored_modules.begin(), plan.ignored_modules.end(), module) != plan.ignored_modules.end();
}

// A dense layer whose down_proj input (88) is not a multiple of 16, and an MoE layer with a shared expert.
TensorMapping model() {
    TensorMapping m;
    m.tensors = {weight("model.embed_tokens.weight", {100, 64}),
                 weight("model.layers.0.self_attn.q_proj.weight", {64, 64}),
                 weight("model.layers.0.self_attn.k_proj.weight", {32, 64}),
                 weight("model.layers.0.self_attn.v_proj.weight", {32, 64}),
                 weight("model.layers.0.self_attn.o_proj.weight", {64, 64}),
                 weight("model.layers.0.mlp.gate_proj.weight", {88, 64}),
                 weight("model.layers.0.mlp.up_proj.weight", {88, 64}),
                 weight("model.layers.0.mlp.down_proj.weight", {64, 88}),
                 weight("model.layers.1.mlp.gate.weight", {2, 64}),
                 weight("model.layers.1.mlp.experts.0.gate_proj.weight", {32, 64}),
                 weight("model.layers.1.mlp.experts.0.up_proj.weight", {32, 64}),
                 weight("model.layers.1.mlp.experts.0.down_proj.weight", {64, 32}),
                 weight("model.layers.1.mlp.experts.1.gate_proj.weight", {32, 64}),
                 weight("model.layers.1.mlp.experts.1.up_proj.weight", {32, 64}),
                 weight("model.layers.1.mlp.experts.1.down_proj.weight", {64, 32}),
                 weight("model.layers.1.mlp.shared_expert.gate_proj.weight", {32, 64}),
                 weight("model.layers.1.mlp.shared_expert.up_proj.weight", {32, 64}),
                 weight("model.layers.1.mlp.shared_expert.down_proj.weight", {64, 32}),
                 weight("lm_head.weight", {100, 64})};
    return m;
}

TEST(Fp4Quantization, Nvfp4WritesPackedCodesFp8ScalesAndAGlobalScale) {
    TensorMapping m = model();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    const QuantizationPlan plan = plan_quantization(m, spec);
    const OutputTensor& packed = m.tensors[index_of(m, "model.layers.0.self_attn.o_proj.weight_packed")];
    EXPECT_EQ(packed.role, OutputTensor::Role::QuantPacked);
    EXPECT_EQ(packed.dtype, DType::U8);
    EXPECT_EQ(packed.shape, (Shape{64, 32}));
    EXPECT_EQ(packed.source_shape, (Shape{64, 64}));
    EXPECT_EQ(packed.quantize_from, DType::BF16);
    const OutputTensor& scale = m.tensors[packed.scale_tensor];
    EXPECT_EQ(scale.name, "model.layers.0.self_attn.o_proj.weight_scale");
    EXPECT_EQ(scale.dtype, DType::F8_E4M3);
    EXPECT_EQ(scale.shape, (Shape{64, 4}));
    ASSERT_TRUE(packed.global_scale_tensor);
    const OutputTensor& global = m.tensors[*packed.global_scale_tensor];
    EXPECT_EQ(global.name, "model.layers.0.self_attn.o_proj.weight_global_scale");
    EXPECT_EQ(global.dtype, DType::F32);
    EXPECT_EQ(global.shape, (Shape{1}));
    EXPECT_TRUE(global.is_derived());
    EXPECT_EQ(packed.global_scale_group, (std::vector<size_t>{index_of(m, "model.layers.0.self_attn.o_proj.weight_packed")}));
    EXPECT_FALSE(has(m, "model.layers.0.self_attn.o_proj.weight"));
    EXPECT_FALSE(has(m, "model.layers.0.self_attn.o_proj.weight_shape"));  // compressed-tensors writes none
    EXPECT_EQ(plan.ignored_modules.front(), "lm_head");
    EXPECT_TRUE(listed(plan, "model.layers.1.mlp.gate"));
}

TEST(Fp4Quantization, FusedGroupsShareOneGlobalScale) {
    TensorMapping m = model();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    plan_quantization(m, spec);
    auto group = [&](const std::string& module) { return m.tensors[index_of(m, module + ".weight_packed")].global_scale_group; };
    const std::vector<size_t> qkv{index_of(m, "model.layers.0.self_attn.q_proj.weight_packed"),
                                  index_of(m, "model.layers.0.self_attn.k_proj.weight_packed"),
                                  index_of(m, "model.layers.0.self_attn.v_proj.weight_packed")};
    for (const char* part : {"q_proj", "k_proj", "v_proj"})
        EXPECT_EQ(group(std::string("model.layers.0.self_attn.") + part), qkv);
    // Each expert's gate/up, and the shared expert's, is its own fused weight; down_proj stands alone.
    for (const std::string e : {"model.layers.1.mlp.experts.0", "model.layers.1.mlp.experts.1",
                                "model.layers.1.mlp.shared_expert"}) {
        const std::vector<size_t> gate_up{index_of(m, e + ".gate_proj.weight_packed"),
                                          index_of(m, e + ".up_proj.weight_packed")};
        EXPECT_EQ(group(e + ".gate_proj"), gate_up) << e;
        EXPECT_EQ(group(e + ".up_proj"), gate_up) << e;
        EXPECT_EQ(group(e + ".down_proj").size(), 1u) << e;
    }
}

TEST(Fp4Quantization, InputSizeNotAMultipleOfTheGroupStaysUnquantizedAndListed) {
    TensorMapping m = model();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Mxfp4;
    const QuantizationPlan plan = plan_quantization(m, spec);
    EXPECT_TRUE(has(m, "model.layers.0.mlp.down_proj.weight"));  // 88 columns
    EXPECT_TRUE(listed(plan, "model.layers.0.mlp.down_proj"));
    EXPECT_TRUE(has(m, "model.layers.0.mlp.gate_proj.weight_packed"));  // its input is 64
    const OutputTensor& scale = m.tensors[index_of(m, "model.layers.0.mlp.gate_proj.weight_scale")];
    EXPECT_EQ(scale.dtype, DType::U8);
    EXPECT_EQ(scale.shape, (Shape{88, 2}));
    EXPECT_FALSE(has(m, "model.layers.0.mlp.gate_proj.weight_global_scale"));  // MXFP4 has none
    ASSERT_EQ(plan.notes.size(), 1u);
    EXPECT_NE(plan.notes[0].find("1 Linear modules left unquantized: their input size is not a multiple of 32"),
              std::string::npos) << plan.notes[0];
    EXPECT_NE(plan.notes[0].find("model.layers.0.mlp.down_proj [64, 88]"), std::string::npos) << plan.notes[0];
}

TEST(Fp4Quantization, OneIgnoredPartLeavesItsFusedGroupUnquantized) {
    TensorMapping m = model();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    spec.ignore = {"model.layers.0.self_attn.k_proj"};
    const QuantizationPlan plan = plan_quantization(m, spec);
    for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
        const std::string module = std::string("model.layers.0.self_attn.") + part;
        EXPECT_TRUE(has(m, module + ".weight")) << module;
        EXPECT_TRUE(listed(plan, module)) << module;
    }
    EXPECT_TRUE(has(m, "model.layers.0.self_attn.o_proj.weight_packed"));
}

TEST(Fp4Quantization, ExpertsOfOneLayerQuantizedAlike) {
    TensorMapping m = model();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    spec.ignore = {"model.layers.1.mlp.experts.0.down_proj"};
    EXPECT_THROW(plan_quantization(m, spec), Error);
    TensorMapping all = model();
    spec.ignore = {"re:model\\.layers\\.1\\.mlp\\.experts\\..*"};
    const QuantizationPlan plan = plan_quantization(all, spec);
    EXPECT_TRUE(listed(plan, "model.layers.1.mlp.experts.1.up_proj"));
    EXPECT_TRUE(has(all, "model.layers.1.mlp.shared_expert.up_proj.weight_packed"));
}

TEST(Fp4Quantization, ConfigBlocksAreCompressedTensors) {
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    const auto nv = quantization_config(spec, {"lm_head"});
    EXPECT_EQ(nv["quant_method"], "compressed-tensors");
    EXPECT_EQ(nv["format"], "nvfp4-pack-quantized");
    EXPECT_EQ(nv["quantization_status"], "compressed");
    const auto& w = nv["config_groups"]["group_0"]["weights"];
    EXPECT_EQ(w["num_bits"], 4);
    EXPECT_EQ(w["type"], "float");
    EXPECT_EQ(w["strategy"], "tensor_group");
    EXPECT_EQ(w["group_size"], 16);
    EXPECT_FALSE(w.contains("scale_dtype"));  // readable by compressed-tensors 0.10-0.12 too
    EXPECT_EQ(nv["ignore"], nlohmann::ordered_json::array({"lm_head"}));
    spec.scheme = QuantScheme::Mxfp4;
    const auto mx = quantization_config(spec, {"lm_head"});
    EXPECT_EQ(mx["format"], "mxfp4-pack-quantized");
    const auto& mw = mx["config_groups"]["group_0"]["weights"];
    EXPECT_EQ(mw["strategy"], "group");
    EXPECT_EQ(mw["group_size"], 32);
    EXPECT_EQ(mw["scale_dtype"], "torch.uint8");
}

TEST(Fp4Quantization, SchemeNames) {
    EXPECT_EQ(parse_quant_scheme("nvfp4"), QuantScheme::Nvfp4);
    EXPECT_EQ(parse_quant_scheme("mxfp4"), QuantScheme::Mxfp4);
    EXPECT_EQ(quant_scheme_name(QuantScheme::Nvfp4), "nvfp4");
    EXPECT_EQ(quant_scheme_name(QuantScheme::Mxfp4), "mxfp4");
}

}  // namespace
}  // namespace vmerge
