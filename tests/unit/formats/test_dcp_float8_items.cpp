// torchao Float8Tensor items in a DCP folder (formats/dcp/dcp_float8_items.h, torch/torchao_float8.h):
// recognised by the item's facts (the pickled class, carried as the scan's metadata), never by a
// tensor's byte width; the scales of every chunk tile the weight's scale grid; anything else is
// refused naming the tensor.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/dcp/dcp_assembly.h"
#include "pickle/pickle.h"
#include "torch/torchao_float8.h"

namespace vmerge {
namespace {

const char* kFqn = "model.model.layers.0.mlp.down_proj.weight";

TensorRef plain(DType dtype, Shape shape, uint64_t offset) {
    TensorRef t;
    t.dtype = dtype;
    t.shape = shape;
    t.stride = contiguous_strides(shape);
    t.storage = {"/ckpt/__0_0.distcp", "data/0", offset, static_cast<uint64_t>(numel(shape)) * element_size(dtype), {}};
    return t;
}

// The scan of a Float8Tensor item of `shape` in blocks of `block`, as scan_torchao_float8_item makes it.
ScannedFile float8_item(Shape shape, Shape block, uint64_t offset = 0) {
    ScannedFile s;
    s.path = "/ckpt/__0_0.distcp";
    const Shape grid{(shape[0] + block[0] - 1) / block[0], (shape[1] + block[1] - 1) / block[1]};
    s.tensors.push_back({kFloat8CodesKey, plain(DType::F8_E4M3, shape, offset), 0});
    s.tensors.push_back({kFloat8ScaleKey, plain(DType::F32, grid, offset + 1000000), 0});
    s.metadata = float8_item_metadata({"torchao.quantization.Float8Tensor", DType::BF16, shape, block});
    return s;
}

DcpMetadata metadata(Shape size, std::vector<Shape> chunk_offsets, Shape chunk_size) {
    DcpMetadata meta;
    meta.dir = "/ckpt";
    DcpTensor t;
    t.fqn = kFqn;
    t.dtype = DType::BF16;
    t.size = size;
    for (const Shape& o : chunk_offsets) t.chunks.push_back({o, chunk_size, "/ckpt/__0_0.distcp", 0, 0});
    meta.tensors.push_back(t);
    return meta;
}

std::string error_of(const DcpMetadata& meta, const std::vector<ScannedFile>& scans, bool megatron = false) {
    try {
        assemble_dcp_tensors(meta, scans, megatron, nullptr);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(DcpFloat8Items, PerRowItemBecomesWeightWithScaleGrid) {
    const TensorMapping m = assemble_dcp_tensors(metadata({32, 64}, {{0, 0}}, {32, 64}), {float8_item({32, 64}, {1, 64})},
                                                 false, nullptr);
    ASSERT_EQ(m.tensors.size(), 1u);
    const OutputTensor& w = m.tensors[0];
    EXPECT_EQ(w.source_dtype, DType::F8_E4M3);
    EXPECT_EQ(w.dtype, DType::BF16);  // the Float8Tensor's dtype: what the codes dequantize to
    ASSERT_TRUE(w.source_scales.has_value());
    const SourceScales& s = m.source_scales.at(*w.source_scales);
    EXPECT_EQ(s.block_rows, 1);
    EXPECT_EQ(s.block_cols, 64);
    EXPECT_EQ(s.scales.shape, (Shape{32, 1}));
    EXPECT_EQ(s.scales.source_dtype, DType::F32);
    EXPECT_EQ(s.scales.name, std::string(kFqn) + ".scale");
}

// A plain float8 tensor (no torchao facts) is not taken as scaled codes: .metadata says bfloat16.
TEST(DcpFloat8Items, OneByteTensorWithoutFactsIsNotFloat8) {
    ScannedFile s;
    s.tensors.push_back({"", plain(DType::F8_E4M3, {32, 64}, 0), 0});
    const std::string what = error_of(metadata({32, 64}, {{0, 0}}, {32, 64}), {s});
    EXPECT_NE(what.find("holds float8_e4m3fn [32, 64], the metadata says bfloat16 [32, 64]"), std::string::npos) << what;
}

TEST(DcpFloat8Items, RowChunksTileTheBlockGrid) {
    const TensorMapping m = assemble_dcp_tensors(metadata({256, 128}, {{0, 0}, {128, 0}}, {128, 128}),
                                                 {float8_item({128, 128}, {128, 128}, 0), float8_item({128, 128}, {128, 128}, 50000)},
                                                 false, nullptr);
    const SourceScales& s = m.source_scales.at(*m.tensors.at(0).source_scales);
    EXPECT_EQ(s.scales.shape, (Shape{2, 1}));
    ASSERT_EQ(s.scales.copies.size(), 2u);
    EXPECT_EQ(s.scales.copies[1].dst_start, (Shape{1, 0}));
    EXPECT_EQ(m.tensors[0].copies.size(), 2u);
}

TEST(DcpFloat8Items, ChunkThatSplitsAScaleBlockIsRefused) {
    const std::string what = error_of(metadata({256, 128}, {{0, 0}, {64, 0}, {128, 0}, {192, 0}}, {64, 128}),
                                      {float8_item({64, 128}, {128, 128}), float8_item({64, 128}, {128, 128}),
                                       float8_item({64, 128}, {128, 128}), float8_item({64, 128}, {128, 128})});
    EXPECT_NE(what.find("'" + std::string(kFqn) + "' chunk [0, 0]"), std::string::npos) << what;
    EXPECT_NE(what.find("splits a scale block of [128, 128]"), std::string::npos) << what;
}

TEST(DcpFloat8Items, SomeChunksFloat8OthersPlainIsRefused) {
    ScannedFile bf16;
    bf16.tensors.push_back({"", plain(DType::BF16, {128, 128}, 90000), 0});
    const std::string what =
        error_of(metadata({256, 128}, {{0, 0}, {128, 0}}, {128, 128}), {float8_item({128, 128}, {128, 128}), bf16});
    EXPECT_NE(what.find("'" + std::string(kFqn) + "': 1 of its 2 chunks hold a torchao.quantization.Float8Tensor"),
              std::string::npos)
        << what;
}

TEST(DcpFloat8Items, ItemWithoutItsScaleIsRefusedNamingTheTensor) {
    ScannedFile s = float8_item({32, 64}, {1, 64});
    s.tensors.pop_back();
    const std::string what = error_of(metadata({32, 64}, {{0, 0}}, {32, 64}), {s});
    EXPECT_NE(what.find("'" + std::string(kFqn) + "' chunk [0, 0]"), std::string::npos) << what;
    EXPECT_NE(what.find("without its qdata and scale"), std::string::npos) << what;
}

TEST(DcpFloat8Items, ItemOfAnotherDtypeThanTheMetadataIsRefused) {
    ScannedFile s = float8_item({32, 64}, {1, 64});
    s.metadata = float8_item_metadata({"torchao.quantization.Float8Tensor", DType::F32, {32, 64}, {1, 64}});
    const std::string what = error_of(metadata({32, 64}, {{0, 0}}, {32, 64}), {s});
    EXPECT_NE(what.find("of float32 [32, 64], the metadata says bfloat16 [32, 64]"), std::string::npos) << what;
}

TEST(DcpFloat8Items, MegatronDistCkptFloat8ItemIsRefused) {
    DcpMetadata meta = metadata({32, 64}, {{0, 0}}, {32, 64});
    meta.tensors[0].fqn = "embedding.word_embeddings.weight";
    const std::string what = error_of(meta, {float8_item({32, 64}, {1, 64})}, true);
    EXPECT_NE(what.find("in a Megatron dist_ckpt"), std::string::npos) << what;
}

TEST(DcpFloat8Items, FactsRoundTripAndMalformedFactsAreRefused) {
    const Float8ItemFacts facts{"torchao.quantization.Float8Tensor", DType::F16, {8, 16}, {8, 16}};
    const auto back = parse_float8_item_metadata(float8_item_metadata(facts), "item");
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->dtype, DType::F16);
    EXPECT_EQ(back->shape, (Shape{8, 16}));
    EXPECT_EQ(back->block_size, (Shape{8, 16}));
    EXPECT_FALSE(parse_float8_item_metadata("", "item").has_value());
    EXPECT_FALSE(parse_float8_item_metadata(R"({"param_shapes": {}})", "item").has_value());
    EXPECT_THROW(parse_float8_item_metadata(R"({"tensor_subclass": "x", "dtype": "int9"})", "item"), Error);
}

}  // namespace
}  // namespace vmerge

namespace vmerge {
namespace {

pickle::ValuePtr global(std::string module, std::string name) {
    auto v = std::make_shared<pickle::Value>();
    v->kind = pickle::Kind::Global;
    v->module = std::move(module);
    v->name = std::move(name);
    return v;
}

pickle::ValuePtr call(pickle::ValuePtr callable, std::vector<pickle::ValuePtr> args) {
    auto tuple = std::make_shared<pickle::Value>();
    tuple->kind = pickle::Kind::Tuple;
    tuple->items = std::move(args);
    auto v = std::make_shared<pickle::Value>();
    v->kind = pickle::Kind::Object;
    v->callable = std::move(callable);
    v->args = std::move(tuple);
    return v;
}

// Transformer Engine's Float8Tensor pickles itself as getattr(Float8Tensor, "_make_in_reduce_ex")(...).
TEST(DcpFloat8Items, TransformerEngineFloat8TensorIsRefusedByName) {
    auto name = std::make_shared<pickle::Value>();
    name->kind = pickle::Kind::String;
    name->text = "_make_in_reduce_ex";
    const auto te = global("transformer_engine.pytorch.tensor.float8_tensor", "Float8Tensor");
    const auto made = call(call(global("builtins", "getattr"), {te, name}), {});
    try {
        refuse_transformer_engine_tensor(*made, "item 'decoder.layers.self_attention.linear_qkv.weight'");
        FAIL() << "a Transformer Engine Float8Tensor was not refused";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("item 'decoder.layers.self_attention.linear_qkv.weight': a Transformer Engine Float8Tensor"),
                  std::string::npos)
            << what;
    }
    // Anything else passes: a plain rebuild is not Transformer Engine's.
    EXPECT_NO_THROW(refuse_transformer_engine_tensor(*call(global("torch._utils", "_rebuild_tensor_v2"), {}), "x"));
}

}  // namespace
}  // namespace vmerge
