#pragma once
// torchao's float8 tensor subclasses as torch.save pickles them (a DCP item is one torch.save of
// one tensor). Recognised by the pickled class, never by a tensor's byte width:
//  - torchao.float8.fsdp_utils.WeightWithDynamicFloat8CastTensor (float8 training with FSDP2's
//    float8 all-gather): a marker around the high-precision master weight `_tensor`, which is
//    what is stored; read as that tensor.
//  - torchao.quantization.Float8Tensor (quantize_ with Float8WeightOnlyConfig or
//    Float8DynamicActivationFloat8WeightConfig): `qdata` (float8 codes) and `scale` (float32,
//    one per block of `block_size`), dequantized as float32(code) * scale, rounded once to the
//    wrapper's dtype (torchao's dequantize()).
// Every other tensor subclass is refused by name (unsupported_tensor_subclass), and so is a
// Transformer Engine FP8 tensor (refuse_transformer_engine_tensor).
#include <optional>
#include <string>

#include "core/tensor_ref.h"
#include "pickle/pickle.h"
#include "zip/zip_archive.h"

namespace vmerge {

// The high-precision tensor a WeightWithDynamicFloat8CastTensor stores (its `_tensor` slot), or
// nullptr when `cls` is another class. Error naming `where` when the slot is missing.
const pickle::Value* float8_cast_master_tensor(const pickle::Value& cls, const pickle::Value& state,
                                               const std::string& where);

// The error for a tensor subclass vmerge does not read, naming it and `where`.
[[noreturn]] void unsupported_tensor_subclass(const pickle::Value& cls, const std::string& where);

// Error naming `where` when `value` is a pickled Transformer Engine tensor (its Float8Tensor's
// __reduce_ex__: a call of getattr(<class>, "_make_in_reduce_ex") on uint8 data and a scale_inv, or
// any call of a transformer_engine class): FP8 parameters of Megatron's --fp8-param-gather, not read
// (docs/quantization.md, "FP8 weights in DCP and Megatron saves"). Returns otherwise.
void refuse_transformer_engine_tensor(const pickle::Value& value, const std::string& where);

// What a torchao Float8Tensor item holds besides its two tensors: ScannedFile::metadata of the
// item, so that every rank's scan carries it.
struct Float8ItemFacts {
    std::string subclass;  // the pickled class, module.name
    DType dtype = DType::BF16;  // the wrapper's dtype: what the codes dequantize to
    Shape shape;                // the wrapper's shape (the codes' shape)
    Shape block_size;           // elements per scale along each dimension
};
std::string float8_item_metadata(const Float8ItemFacts& facts);
// The facts of a scanned item, or nothing when the item is not a torchao Float8Tensor. Error
// naming `where` for metadata that is not what float8_item_metadata writes.
std::optional<Float8ItemFacts> parse_float8_item_metadata(const std::string& metadata, const std::string& where);

// Item entry keys of a Float8Tensor's two tensors in its ScannedFile.
inline constexpr const char* kFloat8CodesKey = "qdata";
inline constexpr const char* kFloat8ScaleKey = "scale";

// When `top` (an item's whole pickle) is a torchao Float8Tensor: its codes and scale as the
// item's two entries and its facts as the item's metadata; false otherwise. Error naming
// `where` and the missing or malformed part for a Float8Tensor that is not what torchao writes.
bool scan_torchao_float8_item(const pickle::Value& top, const ZipArchive& archive, const InputFile& file,
                              const std::string& where, ScannedFile& out);

}  // namespace vmerge
