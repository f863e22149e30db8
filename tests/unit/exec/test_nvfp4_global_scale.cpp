// NVFP4's global scale through the executor (exec/copy_executor.h): computed from the whole fused
// group before any row is quantized, whichever rows a task covers, and written once per weight
// with its row 0.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "exec/copy_executor.h"
#include "exec/float_memory_source.h"
#include "exec/source_reader.h"
#include "mapping/quantization.h"

namespace vmerge {
namespace {

using MemorySource = testing::FloatMemorySource;

size_t index_of(const TensorMapping& m, const std::string& name) {
    for (size_t i = 0; i < m.tensors.size(); ++i)
        if (m.tensors[i].name == name) return i;
    ADD_FAILURE() << "no tensor " << name;
    return 0;
}

// q_proj [4, 16] (largest |w| 3) and k_proj [2, 16] (largest 6), fp32, one fused q/k/v group,
// and o_proj [2, 16] (largest 3) alone.
struct Model {
    std::map<std::string, std::vector<float>> values;

    TensorMapping mapping() {
        TensorMapping m;
        for (const auto& [module, rows, top] : {std::tuple<std::string, int64_t, float>{"q_proj", 4, 3.0f},
                                                {"k_proj", 2, -6.0f}, {"o_proj", 2, 3.0f}}) {
            std::vector<float>& v = values["memory:" + module];
            v.assign(static_cast<size_t>(rows * 16), 0.25f);
            v[5] = top;
            TensorRef source;
            source.dtype = DType::F32;
            source.shape = {rows, 16};
            source.stride = contiguous_strides(source.shape);
            source.storage.file = "memory:" + module;
            source.storage.byte_size = source.nbytes();
            m.sources.push_back(source);
            OutputTensor t;
            t.name = "model.layers.0.self_attn." + module + ".weight";
            t.source_dtype = t.dtype = DType::F32;
            t.shape = source.shape;
            t.copies.push_back({static_cast<uint32_t>(m.sources.size() - 1), {0, 0}, {0, 0}, source.shape});
            m.tensors.push_back(t);
        }
        return m;
    }
};

TEST(Nvfp4GlobalScaleInTheExecutor, SharedByTheFusedGroupAndWrittenOnceWithRowZero) {
    Model model;
    TensorMapping m = model.mapping();
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Nvfp4;
    plan_quantization(m, spec);
    CopyExecutor executor(m, 1 << 20, &spec);
    executor.read_sources_with([&](const std::string& file) -> std::unique_ptr<SourceReader> {
        return std::make_unique<MemorySource>(model.values.at(file));
    });
    const size_t q = index_of(m, "model.layers.0.self_attn.q_proj.weight_packed");
    const size_t k = index_of(m, "model.layers.0.self_attn.k_proj.weight_packed");
    const size_t o = index_of(m, "model.layers.0.self_attn.o_proj.weight_packed");
    std::map<size_t, std::vector<float>> globals;  // global scale tensor -> every value written
    // q's rows in two tasks, the second first (as another rank's share would be): the group's
    // scale is known before either is quantized.
    executor.run({{q, 2, 4}, {q, 0, 2}, {k, 0, 2}, {o, 0, 2}}, [&](const RowBlock& b) {
        if (m.tensors[b.tensor].role != OutputTensor::Role::QuantGlobalScale) return;
        ASSERT_EQ(b.size, 4u);
        EXPECT_EQ(b.row_begin, 0);
        float value;
        std::memcpy(&value, b.data, 4);
        globals[b.tensor].push_back(value);
    });
    // q/k/v: 2688 / 6 = 448 in float32 (1/6 rounds to 0.16666667, times 2688 to 448); o alone:
    // 2688 / 3 = 896.
    EXPECT_EQ(globals[*m.tensors[q].global_scale_tensor], std::vector<float>{448.0f});
    EXPECT_EQ(globals[*m.tensors[k].global_scale_tensor], std::vector<float>{448.0f});
    EXPECT_EQ(globals[*m.tensors[o].global_scale_tensor], std::vector<float>{896.0f});
    EXPECT_EQ(globals.size(), 3u);
}

}  // namespace
}  // namespace vmerge
