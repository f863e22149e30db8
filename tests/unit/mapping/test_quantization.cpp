// Quantization planning (mapping/quantization.h): the vLLM kernel rules, the `ignore` list, MoE
// experts quantized alike.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "mapping/quantization.h"
#include "test_support.h"

namespace vmerge {
namespace {

using testing::mapping_of;
using testing::tensor;
TEST(Quantization, KernelRulesRefuseGroupSizesNoVllmKernelRuns) {
    QuantizeSpec spec;
    for (int64_t g : {0, 32, 64, 128}) {
        spec.group_size = g;
        EXPECT_EQ(unsupported_by_vllm(spec), "") << g;
    }
    for (int64_t g : {16, 48, 96, 256}) {
        spec.group_size = g;
        EXPECT_NE(unsupported_by_vllm(spec).find("--group_size " + std::to_string(g)), std::string::npos);
        auto m = mapping_of({tensor("model.layers.0.mlp.up_proj.weight", DType::BF16, {4, 768})});
        EXPECT_THROW(plan_quantization(m, spec), Error);
        spec.allow_unsupported = true;
        auto ok = mapping_of({tensor("model.layers.0.mlp.up_proj.weight", DType::BF16, {4, 768})});
        EXPECT_FALSE(plan_quantization(ok, spec).notes.empty());
        spec.allow_unsupported = false;
    }
}

TEST(Quantization, EveryUnquantizedLinearIsIgnoredScoreToo) {
    QuantizeSpec spec;
    spec.group_size = 32;
    auto m = mapping_of({tensor("model.embed_tokens.weight", DType::BF16, {10, 64}),
                         tensor("model.layers.0.self_attn.q_proj.weight", DType::BF16, {64, 64}),
                         tensor("model.layers.0.mlp.down_proj.weight", DType::BF16, {64, 48}),  // 48 % 32 != 0
                         tensor("model.norm.weight", DType::BF16, {64}), tensor("score.weight", DType::BF16, {1, 64})});
    const QuantizationPlan plan = plan_quantization(m, spec);
    EXPECT_EQ(plan.ignored_modules, (std::vector<std::string>{"lm_head", "model.layers.0.mlp.down_proj", "score"}));
}

TEST(Quantization, ExpertsOfOneMoeLayerMustBeQuantizedAlike) {
    QuantizeSpec spec;
    spec.group_size = 0;
    auto experts = [] {
        std::vector<OutputTensor> t;
        for (int e = 0; e < 3; ++e)
            for (const char* p : {"gate_proj", "down_proj"})
                t.push_back(tensor("model.layers.2.mlp.experts." + std::to_string(e) + "." + p + ".weight", DType::BF16, {8, 8}));
        return mapping_of(std::move(t));
    };
    auto alike = experts();
    spec.ignore = {"re:.*experts\\.\\d+\\.down_proj"};  // every expert's down_proj: alike
    EXPECT_NO_THROW(plan_quantization(alike, spec));
    auto uneven = experts();
    spec.ignore = {"model.layers.2.mlp.experts.1.gate_proj"};
    try {
        plan_quantization(uneven, spec);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("MoE layer model.layers.2.mlp.experts: expert "
                                             "model.layers.2.mlp.experts.0.gate_proj is quantized but "
                                             "model.layers.2.mlp.experts.1.gate_proj is not"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace vmerge
