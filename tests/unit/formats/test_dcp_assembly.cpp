// assemble_dcp_tensors (formats/dcp/dcp_assembly.h) on Megatron torch_dist keys: a grouped
// MLP's LoRA adapter, which has no expert axis to split, is refused by name.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "formats/dcp/dcp_assembly.h"

namespace vmerge {
namespace {

// SequentialMLP adapters are [layers, experts, r, in]; a TEGroupedMLP adapter [layers, r, in]
// would otherwise have its r rows read as experts.
TEST(DcpAssembly, GroupedExpertsAdapterWithoutExpertAxisIsRefused) {
    DcpMetadata meta;
    meta.dir = "/ckpt/iter_0000001";
    DcpTensor t;
    t.fqn = "decoder.layers.mlp.experts.experts.linear_fc1.adapter.linear_in.weight";
    t.dtype = DType::BF16;
    t.size = {2, 4, 32};
    meta.tensors.push_back(t);
    try {
        assemble_dcp_tensors(meta, {}, true, nullptr);
        FAIL() << "accepted a [layers, r, in] expert adapter";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'" + t.fqn + "' is [2, 4, 32], expected [layers, experts, rows, columns]"), std::string::npos)
            << what;
    }
}

}  // namespace
}  // namespace vmerge
