// The executor quantizes a weight's blocks on its writer thread (exec/copy_executor.cpp,
// quantize_and_sink), overlapping the next block's read: the codes and scales a weight cut into
// several blocks gets are those of the FP8_DYNAMIC kernel over the whole weight at once, and a
// non-finite weight in a later block is still refused by run, naming its row, after the blocks
// before it were written.
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
#include "exec/fp8_quantize.h"
#include "exec/source_reader.h"
#include "mapping/quantization.h"

namespace vmerge {
namespace {

constexpr int64_t kRows = 100, kCols = 1024;
const std::string kWeight = "model.layers.0.mlp.down_proj.weight";

using MemorySource = testing::FloatMemorySource;

// An fp32 master of a BF16 model's weight [kRows, kCols], planned for FP8_DYNAMIC.
TensorMapping fp8_dynamic_mapping(const QuantizeSpec& spec) {
    TensorMapping m;
    TensorRef source;
    source.dtype = DType::F32;
    source.shape = {kRows, kCols};
    source.stride = contiguous_strides(source.shape);
    source.storage.file = "memory:weight";
    source.storage.byte_size = source.nbytes();
    m.sources.push_back(source);
    OutputTensor t;
    t.name = kWeight;
    t.source_dtype = DType::F32;
    t.dtype = DType::BF16;
    t.shape = source.shape;
    t.copies.push_back({0, {0, 0}, {0, 0}, source.shape});
    m.tensors.push_back(t);
    plan_quantization(m, spec);
    return m;
}

std::vector<float> weight_values() {
    std::vector<float> w(static_cast<size_t>(kRows * kCols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 7);
    return w;
}

struct Written {
    std::vector<unsigned char> codes, scales;
    int weight_blocks = 0;
};

// Runs the executor over the whole weight with a 1 MiB budget (blocks of 36 rows); returns
// the Error's message, or "(no error)".
std::string run_blocks(const std::vector<float>& w, Written& written) {
    QuantizeSpec spec;
    spec.scheme = QuantScheme::Fp8Dynamic;
    const TensorMapping m = fp8_dynamic_mapping(spec);
    CopyExecutor executor(m, 1 << 20, &spec);
    executor.read_sources_with(
        [&w](const std::string&) -> std::unique_ptr<SourceReader> { return std::make_unique<MemorySource>(w); });
    try {
        executor.run({{0, 0, kRows}}, [&](const RowBlock& b) {
            const OutputTensor& t = m.tensors[b.tensor];
            if (t.role == OutputTensor::Role::QuantPacked) {
                EXPECT_EQ(static_cast<size_t>(b.row_begin) * kCols, written.codes.size());
                written.codes.insert(written.codes.end(), b.data, b.data + b.size);
                ++written.weight_blocks;
            } else {
                EXPECT_EQ(static_cast<size_t>(b.row_begin) * 2, written.scales.size());  // one bf16 per row
                written.scales.insert(written.scales.end(), b.data, b.data + b.size);
            }
        });
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(QuantizeOnWriter, BlocksGetTheCodesAndScalesOfTheWholeWeight) {
    const std::vector<float> w = weight_values();
    Written written;
    ASSERT_EQ(run_blocks(w, written), "(no error)");
    EXPECT_GE(written.weight_blocks, 3);
    // The kernel over all rows at once, from the values rounded to the model dtype.
    std::vector<float> rounded(w.size());
    round_through(w.data(), DType::F32, DType::BF16, rounded.data(), w.size());
    std::vector<unsigned char> codes(w.size()), scales(static_cast<size_t>(kRows) * 2);
    QuantError error;
    quantize_fp8_channels(rounded.data(), kRows, kCols, DType::BF16, codes.data(), scales.data(), error, kWeight, 0);
    EXPECT_EQ(written.codes, codes);
    EXPECT_EQ(written.scales, scales);
}

TEST(QuantizeOnWriter, ANonFiniteWeightInALaterBlockIsRefusedAfterTheBlocksBeforeIt) {
    std::vector<float> w = weight_values();
    w[static_cast<size_t>(80 * kCols + 3)] = std::numeric_limits<float>::quiet_NaN();
    Written written;
    EXPECT_EQ(run_blocks(w, written),
              kWeight + ": row 80, column 3 is nan; a weight must be finite to be quantized (no scale represents it); "
                        "merge without --quantize to keep the weights as they are, or leave the module out with "
                        "--quantize_ignore model.layers.0.mlp.down_proj");
    // Rows 0-71 (two blocks of 36) were quantized and written; the block of row 80 was not.
    EXPECT_EQ(written.codes.size(), static_cast<size_t>(72 * kCols));
}

}  // namespace
}  // namespace vmerge
