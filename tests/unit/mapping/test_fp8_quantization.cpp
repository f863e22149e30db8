// FP8 planning (mapping/fp8_quantization.h, fp8_shape_rules.h): which modules, which tensors,
// config blocks, vLLM shape rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "mapping/fp8_quantization.h"
#include "mapping/fp8_shape_rules.h"

namespace vmerge {
namespace {

OutputTensor weight(const std::string& name, Shape shape, DType dtype = DType::BF16) {
    OutputTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = t.source_dtype = dtype;
    return t;
}

const OutputTensor* find(const TensorMapping& m, const std::string& name) {
    for (const auto& t : m.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

TensorMapping moe_layer() {
    TensorMapping m;
    m.tensors = {weight("model.embed_tokens.weight", {100, 64}),
                 weight("model.layers.0.input_layernorm.weight", {64}),
                 weight("model.layers.0.self_attn.q_proj.weight", {256, 64}),
                 weight("model.layers.0.self_attn.k_proj.weight", {128, 64}),
                 weight("model.layers.0.self_attn.v_proj.weight", {128, 64}),
                 weight("model.layers.0.self_attn.q_proj.bias", {256}),
                 weight("model.layers.0.self_attn.o_proj.weight", {64, 256}),
                 weight("model.layers.0.mlp.gate.weight", {4, 64}),
                 weight("model.layers.0.mlp.experts.0.gate_proj.weight", {200, 64}),
                 weight("model.layers.0.mlp.experts.0.up_proj.weight", {200, 64}),
                 weight("model.layers.0.mlp.experts.0.down_proj.weight", {64, 200}),
                 weight("model.layers.0.mlp.shared_expert_gate.weight", {1, 64}),
                 weight("model.layers.1.eh_proj.weight", {64, 128}),
                 weight("model.layers.1.self_attn.kv_a_proj_with_mqa.weight", {576, 64}),
                 weight("lm_head.weight", {100, 64})};
    return m;
}

TEST(Fp8Quantization, BlockSchemeWritesCodesAndBlockScales) {
    TensorMapping m = moe_layer();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8Block;
    const QuantizationPlan plan = plan_quantization(m, spec);
    const OutputTensor* q = find(m, "model.layers.0.self_attn.q_proj.weight");
    ASSERT_TRUE(q);
    EXPECT_EQ(q->dtype, DType::F8_E4M3);
    EXPECT_EQ(q->role, OutputTensor::Role::QuantPacked);
    EXPECT_EQ(q->row_align, 128);
    EXPECT_EQ(q->quantize_from, DType::BF16);
    const OutputTensor& scale = m.tensors.at(q->scale_tensor);
    EXPECT_EQ(scale.name, "model.layers.0.self_attn.q_proj.weight_scale_inv");
    EXPECT_EQ(scale.dtype, DType::F32);
    EXPECT_EQ(scale.shape, (Shape{2, 1}));
    // Partial blocks: 576 rows are 4.5 stripes, 200 rows 1.56.
    const OutputTensor* kv_a = find(m, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight");
    ASSERT_TRUE(kv_a);
    EXPECT_EQ(m.tensors.at(kv_a->scale_tensor).shape, (Shape{5, 1}));
    const OutputTensor* down = find(m, "model.layers.0.mlp.experts.0.down_proj.weight");
    EXPECT_EQ(m.tensors.at(down->scale_tensor).shape, (Shape{1, 2}));
    // Left as they are, and listed: the router, the shared-expert gate, MTP eh_proj, lm_head.
    for (const char* kept : {"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.shared_expert_gate.weight",
                             "model.layers.1.eh_proj.weight", "lm_head.weight", "model.embed_tokens.weight",
                             "model.layers.0.self_attn.q_proj.bias"})
        EXPECT_EQ(find(m, kept)->dtype, DType::BF16) << kept;
    EXPECT_EQ(plan.ignored_modules, (std::vector<std::string>{"lm_head", "model.layers.0.mlp.gate",
                                                              "model.layers.0.mlp.shared_expert_gate",
                                                              "model.layers.1.eh_proj"}));
    const auto config = quantization_config(spec, plan.ignored_modules);
    EXPECT_EQ(config.dump(),
              R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128],)"
              R"("modules_to_not_convert":["lm_head","model.layers.0.mlp.gate","model.layers.0.mlp.shared_expert_gate",)"
              R"("model.layers.1.eh_proj"],"ignored_layers":["lm_head","model.layers.0.mlp.gate",)"
              R"("model.layers.0.mlp.shared_expert_gate","model.layers.1.eh_proj"]})");
}

TEST(Fp8Quantization, DynamicSchemeWritesRowScalesInTheWeightDtype) {
    TensorMapping m = moe_layer();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8Dynamic;
    const QuantizationPlan plan = plan_quantization(m, spec);
    const OutputTensor* o = find(m, "model.layers.0.self_attn.o_proj.weight");
    const OutputTensor& scale = m.tensors.at(o->scale_tensor);
    EXPECT_EQ(scale.name, "model.layers.0.self_attn.o_proj.weight_scale");
    EXPECT_EQ(scale.dtype, DType::BF16);
    EXPECT_EQ(scale.shape, (Shape{64, 1}));
    EXPECT_EQ(o->row_align, 1);
    const auto config = quantization_config(spec, plan.ignored_modules);
    EXPECT_EQ(config["format"], "float-quantized");
    EXPECT_EQ(config["config_groups"]["group_0"]["weights"]["strategy"], "channel");
    EXPECT_EQ(config["config_groups"]["group_0"]["input_activations"]["strategy"], "token");
    EXPECT_EQ(config["config_groups"]["group_0"]["input_activations"]["dynamic"], true);
    EXPECT_TRUE(config["config_groups"]["group_0"]["input_activations"]["observer"].is_null());
    EXPECT_EQ(config["ignore"], plan.ignored_modules);
}

TEST(Fp8Quantization, CtBlockSchemeWritesBlockScalesInTheWeightDtypeAndLeavesPartialColumnsOut) {
    // up [200, 128]: a partial row block, quantized (compressed-tensors pads rows); down [128, 200]:
    // input not a multiple of 128, left in bf16 and listed.
    TensorMapping m;
    m.tensors = {weight("model.layers.0.self_attn.q_proj.weight", {256, 128}),
                 weight("model.layers.0.self_attn.k_proj.weight", {128, 128}),
                 weight("model.layers.0.self_attn.v_proj.weight", {128, 128}),
                 weight("model.layers.0.self_attn.o_proj.weight", {128, 256}),
                 weight("model.layers.0.mlp.gate_proj.weight", {200, 128}),
                 weight("model.layers.0.mlp.up_proj.weight", {200, 128}),
                 weight("model.layers.0.mlp.down_proj.weight", {128, 200}),
                 weight("lm_head.weight", {100, 128})};
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8CtBlock;
    const QuantizationPlan plan = plan_quantization(m, spec);
    const OutputTensor* up = find(m, "model.layers.0.mlp.up_proj.weight");
    ASSERT_TRUE(up);
    EXPECT_EQ(up->dtype, DType::F8_E4M3);
    EXPECT_EQ(up->row_align, 128);
    EXPECT_EQ(up->scale_row_block, 128);
    const OutputTensor& scale = m.tensors.at(up->scale_tensor);
    EXPECT_EQ(scale.name, "model.layers.0.mlp.up_proj.weight_scale");
    EXPECT_EQ(scale.dtype, DType::BF16);
    EXPECT_EQ(scale.shape, (Shape{2, 1}));
    EXPECT_EQ(m.tensors.at(find(m, "model.layers.0.self_attn.o_proj.weight")->scale_tensor).shape, (Shape{1, 2}));
    EXPECT_EQ(find(m, "model.layers.0.mlp.down_proj.weight")->dtype, DType::BF16);
    EXPECT_FALSE(find(m, "model.layers.0.mlp.down_proj.weight_scale"));
    EXPECT_EQ(plan.ignored_modules, (std::vector<std::string>{"lm_head", "model.layers.0.mlp.down_proj"}));
    ASSERT_EQ(plan.notes.size(), 1u);
    EXPECT_NE(plan.notes[0].find("1 Linear modules left unquantized: their input size is not a multiple of 128"),
              std::string::npos);
    EXPECT_NE(plan.notes[0].find("model.layers.0.mlp.down_proj [128, 200]"), std::string::npos);
    // compressed-tensors' FP8_BLOCK preset under the keys the other float-quantized configs carry.
    EXPECT_EQ(quantization_config(spec, plan.ignored_modules).dump(),
              R"({"quant_method":"compressed-tensors","format":"float-quantized","quantization_status":"compressed",)"
              R"("config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"float",)"
              R"("symmetric":true,"group_size":null,"strategy":"block","block_structure":[128,128],"dynamic":false,)"
              R"("actorder":null,"observer":"minmax","observer_kwargs":{}},"input_activations":{"num_bits":8,)"
              R"("type":"float","symmetric":true,"group_size":128,"strategy":"group","block_structure":null,)"
              R"("dynamic":true,"actorder":null,"observer":null,"observer_kwargs":{}},"output_activations":null}},)"
              R"("ignore":["lm_head","model.layers.0.mlp.down_proj"],"kv_cache_scheme":null,)"
              R"("global_compression_ratio":null,"sparsity_config":{}})");
}

TEST(Fp8Quantization, SourcesInTheOutputSchemeArePassedThrough) {
    // Two FP8 sources of [256, 128] in 128x128 blocks, one with BF16 scales (compressed-tensors
    // FP8_BLOCK), one with F32 scales (DeepSeek block FP8), in a BF16 model.
    auto sources = [] {
        TensorMapping m;
        for (DType scale_dtype : {DType::BF16, DType::F32}) {
            SourceScales s;
            s.scales = weight("scales", {2, 1}, scale_dtype);
            m.source_scales.push_back(s);
        }
        m.tensors = {weight("model.layers.0.mlp.gate_proj.weight", {256, 128}),
                     weight("model.layers.0.mlp.down_proj.weight", {128, 256})};
        m.tensors[0].source_scales = 0;
        m.tensors[1].source_scales = 1;
        return m;
    };
    auto passed = [&](QuantScheme scheme, Fp8ScaleFormat format) {
        TensorMapping m = sources();
        QuantizeSpec spec;
        spec.scheme = scheme;
        spec.scale_format = format;
        const QuantizationPlan plan = plan_quantization(m, spec);
        std::vector<bool> kept;
        for (const char* w : {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.down_proj.weight"})
            kept.push_back(find(m, w)->quantized_as_stored);
        EXPECT_EQ(plan.passed_through, static_cast<size_t>(std::count(kept.begin(), kept.end(), true)));
        return kept;
    };
    EXPECT_EQ(passed(QuantScheme::Fp8CtBlock, Fp8ScaleFormat::Float), (std::vector<bool>{true, false}));
    EXPECT_EQ(passed(QuantScheme::Fp8Block, Fp8ScaleFormat::Float), (std::vector<bool>{false, true}));
    // UE8M0 scales must be powers of two: a source's need not be, so it is quantized again.
    EXPECT_EQ(passed(QuantScheme::Fp8Block, Fp8ScaleFormat::Ue8m0), (std::vector<bool>{false, false}));
    TensorMapping m = sources();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8CtBlock;
    plan_quantization(m, spec);
    EXPECT_TRUE(find(m, "model.layers.0.mlp.gate_proj.weight_scale"));
    EXPECT_EQ(find(m, "model.layers.0.mlp.gate_proj.weight_scale")->dtype, DType::BF16);
}

TEST(Fp8Quantization, Ue8m0ScalesAddScaleFmtToTheBlockConfig) {
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8Block;
    spec.scale_format = Fp8ScaleFormat::Ue8m0;
    EXPECT_EQ(quantization_config(spec, {"lm_head"}).dump(),
              R"({"quant_method":"fp8","fmt":"e4m3","activation_scheme":"dynamic","weight_block_size":[128,128],)"
              R"("scale_fmt":"ue8m0","modules_to_not_convert":["lm_head"],"ignored_layers":["lm_head"]})");
    EXPECT_NE(quantization_description(spec).find("--scale_format ue8m0"), std::string::npos);
}

TEST(Fp8Quantization, IgnoringOnePartOfAFusedGroupLeavesTheGroup) {
    TensorMapping m = moe_layer();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8Block;
    spec.ignore = {"model.layers.0.self_attn.k_proj"};
    const QuantizationPlan plan = plan_quantization(m, spec);
    for (const char* part : {"q_proj", "k_proj", "v_proj"})
        EXPECT_EQ(find(m, std::string("model.layers.0.self_attn.") + part + ".weight")->dtype, DType::BF16) << part;
    EXPECT_EQ(find(m, "model.layers.0.self_attn.o_proj.weight")->dtype, DType::F8_E4M3);
    ASSERT_FALSE(plan.notes.empty());
    EXPECT_NE(plan.notes[0].find("2 Linear modules left unquantized with the rest of their fused group"),
              std::string::npos);
    EXPECT_EQ(fused_part("model.layers.0.mlp.up_proj").group, "model.layers.0.mlp|gate_up");
    EXPECT_TRUE(fused_part("model.layers.0.mlp.up_proj").last);
    EXPECT_TRUE(fused_part("model.layers.0.mlp.down_proj").group.empty());
}

TEST(Fp8Quantization, FullBlocksOnlyLeavesPartialBlocksAndTheirFusedGroupUnquantized) {
    // q [256, 128] and k/v [128, 128] are whole blocks; gate/up [200, 128] and down [128, 200] are not.
    auto dense = [] {
        TensorMapping m;
        m.tensors = {weight("model.layers.0.self_attn.q_proj.weight", {256, 128}),
                     weight("model.layers.0.self_attn.k_proj.weight", {128, 128}),
                     weight("model.layers.0.self_attn.v_proj.weight", {128, 128}),
                     weight("model.layers.0.self_attn.o_proj.weight", {128, 256}),
                     weight("model.layers.0.mlp.gate_proj.weight", {256, 128}),
                     weight("model.layers.0.mlp.up_proj.weight", {200, 128}),
                     weight("model.layers.0.mlp.down_proj.weight", {128, 200}),
                     weight("lm_head.weight", {100, 128})};
        return m;
    };
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8Block;
    // Today's layout: everything quantized, partial blocks said in a note.
    TensorMapping kept = dense();
    const QuantizationPlan as_is = plan_quantization(kept, spec);
    for (const char* m : {"self_attn.q_proj", "mlp.up_proj", "mlp.down_proj"})
        EXPECT_EQ(find(kept, std::string("model.layers.0.") + m + ".weight")->dtype, DType::F8_E4M3) << m;
    EXPECT_EQ(as_is.ignored_modules, std::vector<std::string>{"lm_head"});
    ASSERT_EQ(as_is.notes.size(), 1u);
    EXPECT_NE(as_is.notes[0].find("2 Linear modules written with partial 128x128 blocks"), std::string::npos);
    EXPECT_NE(as_is.notes[0].find("transformers cannot dequantize"), std::string::npos);
    EXPECT_NE(as_is.notes[0].find("model.layers.0.mlp.up_proj [200, 128]"), std::string::npos);
    EXPECT_NE(as_is.notes[0].find("--fp8_full_blocks_only"), std::string::npos);

    // The option: up and down stay BF16, gate with them (vLLM fuses gate/up), attention is FP8.
    spec.fp8_full_blocks_only = true;
    TensorMapping whole = dense();
    const QuantizationPlan plan = plan_quantization(whole, spec);
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
        EXPECT_EQ(find(whole, std::string("model.layers.0.") + m + ".weight")->dtype, DType::F8_E4M3) << m;
    for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
        EXPECT_EQ(find(whole, std::string("model.layers.0.") + m + ".weight")->dtype, DType::BF16) << m;
        EXPECT_FALSE(find(whole, std::string("model.layers.0.") + m + ".weight_scale_inv")) << m;
    }
    EXPECT_EQ(plan.ignored_modules, (std::vector<std::string>{"lm_head", "model.layers.0.mlp.gate_proj",
                                                              "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"}));
    const auto config = quantization_config(spec, plan.ignored_modules);
    EXPECT_EQ(config["modules_to_not_convert"], plan.ignored_modules);
    ASSERT_EQ(plan.notes.size(), 2u);
    EXPECT_NE(plan.notes[0].find("1 Linear modules left unquantized with the rest of their fused group"), std::string::npos);
    EXPECT_NE(plan.notes[1].find("2 Linear modules left unquantized by --fp8_full_blocks_only"), std::string::npos);

    // A model of whole blocks: the option changes nothing, and there is no note.
    TensorMapping full;
    full.tensors = {weight("model.layers.0.self_attn.q_proj.weight", {256, 128}),
                    weight("model.layers.0.mlp.down_proj.weight", {128, 256})};
    const QuantizationPlan none = plan_quantization(full, spec);
    EXPECT_EQ(find(full, "model.layers.0.mlp.down_proj.weight")->dtype, DType::F8_E4M3);
    EXPECT_TRUE(none.notes.empty());
    EXPECT_EQ(none.ignored_modules, std::vector<std::string>{"lm_head"});

    // FP8_DYNAMIC has no blocks: no note.
    TensorMapping rows = dense();
    QuantizeSpec dynamic;
    dynamic.scheme = QuantScheme::Fp8Dynamic;
    EXPECT_TRUE(plan_quantization(rows, dynamic).notes.empty());
}

TEST(Fp8Quantization, ShapeRulesNameWhatVllmRefuses) {
    // Llama-3-8B's dimensions load at TP 1..8: no warning.
    EXPECT_TRUE(block_fp8_shape_warnings({{"model.layers.0.self_attn.q_proj", 4096, 4096},
                                          {"model.layers.0.self_attn.k_proj", 1024, 4096},
                                          {"model.layers.0.mlp.gate_proj", 14336, 4096},
                                          {"model.layers.0.mlp.down_proj", 4096, 14336}})
                    .empty());
    // Qwen2-7B's 3584 is 3.5 blocks per rank at TP 8.
    const auto qwen = block_fp8_shape_warnings({{"model.layers.0.self_attn.o_proj", 3584, 3584}});
    ASSERT_EQ(qwen.size(), 1u);
    EXPECT_NE(qwen[0].find("size 8"), std::string::npos);
    EXPECT_NE(qwen[0].find("input 3584 / 8 = 448"), std::string::npos);
    const auto w = block_fp8_shape_warnings({{"model.layers.0.self_attn.k_proj", 64, 128},
                                             {"model.layers.0.mlp.experts.0.gate_proj", 200, 128},
                                             {"model.layers.0.self_attn.o_proj", 128, 384}});
    ASSERT_EQ(w.size(), 5u);  // fused parts, MoE intermediate, TP 2, 4, 8
    EXPECT_NE(w[0].find("fused-parts-128"), std::string::npos);
    EXPECT_NE(w[0].find("model.layers.0.self_attn.k_proj [64, 128]"), std::string::npos);
    EXPECT_NE(w[1].find("moe-intermediate-128"), std::string::npos);
    EXPECT_NE(w[2].find("tp-shard-128 (at tensor-parallel size 2"), std::string::npos);
    EXPECT_NE(w[4].find("size 8"), std::string::npos);
}

}  // namespace
}  // namespace vmerge
