#include "torch/torchao_float8.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "torch/torch_pickle.h"

namespace vmerge {
namespace {

using pickle::Kind;
using pickle::Value;

bool is_class(const Value& cls, std::string_view module_prefix, std::string_view name) {
    return cls.kind == Kind::Global && cls.name == name && cls.module.starts_with(module_prefix);
}

bool is_torchao_float8_tensor(const Value& cls) { return is_class(cls, "torchao.quantization", "Float8Tensor"); }

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw Error(where + ": " + what); }

// The (func, cls, wrapper args, state) of a _rebuild_from_type_v2 call, or nullptr.
const Value* rebuild_from_type_args(const Value& v) {
    if (v.kind != Kind::Object || !v.callable || !pickle::is_global(*v.callable, "torch._tensor", "_rebuild_from_type_v2"))
        return nullptr;
    if (!v.args || v.args->kind != Kind::Tuple || v.args->items.size() < 4) return nullptr;
    return v.args.get();
}

// The wrapper's (cls, dtype, size, ...) arguments: its dtype and size.
void read_wrapper(const Value& wrapper_args, Float8ItemFacts& facts, const std::string& where) {
    if (wrapper_args.kind != Kind::Tuple || wrapper_args.items.size() < 3)
        fail(where, "a torchao Float8Tensor without its (class, dtype, size) wrapper arguments");
    const Value& dtype = *wrapper_args.items[1];
    const auto parsed = dtype.kind == Kind::Global && dtype.module == "torch" ? dtype_from_torch_name(dtype.name) : std::nullopt;
    if (!parsed || !is_floating(*parsed) || element_size(*parsed) < 2)
        fail(where, "a torchao Float8Tensor whose dtype is " + pickle::describe(dtype) +
                        ", expected float32, bfloat16 or float16 (what its codes dequantize to)");
    facts.dtype = *parsed;
    facts.shape = torch_size_of(*wrapper_args.items[2], where + " (Float8Tensor size)");
}

const Value& slot(const Value& state, const char* name, const std::string& where) {
    const Value* v = state.kind == Kind::Dict ? pickle::dict_get(state, name) : nullptr;
    if (!v)
        fail(where, std::string("a torchao Float8Tensor without its '") + name +
                        "' (torchao pickles qdata, scale and block_size): the item is damaged or from another torchao");
    return *v;
}

TensorRef slot_tensor(const Value& state, const char* name, const ZipArchive& archive, const InputFile& file,
                      const std::string& where) {
    TensorRef ref;
    if (!interpret_tensor(slot(state, name, where), archive, file, ref, where + " (Float8Tensor " + name + ")") ||
        ref.dtensor)
        fail(where, std::string("the torchao Float8Tensor's '") + name + "' is not a plain tensor");
    return ref;
}

// The codes and scale against the wrapper: codes E4M3 of its shape, one float scale per block.
void check_float8_parts(const Float8ItemFacts& facts, const TensorRef& codes, const TensorRef& scale, const std::string& where) {
    if (codes.dtype != DType::F8_E4M3)
        fail(where, "a torchao Float8Tensor whose qdata is " + std::string(torch_name(codes.dtype)) +
                        ", expected float8_e4m3fn (the only float8 codes vmerge dequantizes)");
    if (codes.shape != facts.shape)
        fail(where, "a torchao Float8Tensor of size " + shape_to_string(facts.shape) + " whose qdata is " +
                        shape_to_string(codes.shape));
    if (scale.dtype != DType::F32 && scale.dtype != DType::BF16 && scale.dtype != DType::F16)
        fail(where, "a torchao Float8Tensor whose scale is " + std::string(torch_name(scale.dtype)) +
                        ", expected float32, bfloat16 or float16");
    if (facts.block_size.size() != facts.shape.size() || scale.shape.size() != facts.shape.size())
        fail(where, "a torchao Float8Tensor of size " + shape_to_string(facts.shape) + " with block_size " +
                        shape_to_string(facts.block_size) + " and scale " + shape_to_string(scale.shape) +
                        ": expected one block size and one scale dimension per dimension");
    for (size_t d = 0; d < facts.shape.size(); ++d) {
        const int64_t block = facts.block_size[d];
        if (block <= 0 || (facts.shape[d] > 0 && scale.shape[d] != (facts.shape[d] + block - 1) / block))
            fail(where, "a torchao Float8Tensor of size " + shape_to_string(facts.shape) + " in blocks of " +
                            shape_to_string(facts.block_size) + " whose scale is " + shape_to_string(scale.shape) +
                            ", expected one scale per block");
    }
}

}  // namespace

const Value* float8_cast_master_tensor(const Value& cls, const Value& state, const std::string& where) {
    if (!is_class(cls, "torchao.float8", "WeightWithDynamicFloat8CastTensor")) return nullptr;
    const Value* master = state.kind == Kind::Dict ? pickle::dict_get(state, "_tensor") : nullptr;
    if (!master) fail(where, "a torchao WeightWithDynamicFloat8CastTensor without its '_tensor' (the stored weight)");
    return master;
}

void unsupported_tensor_subclass(const Value& cls, const std::string& where) {
    fail(where, "unsupported tensor subclass " + pickle::describe(cls) +
                    " (vmerge reads DTensor, torchao's Float8Tensor (qdata + scale) and WeightWithDynamicFloat8CastTensor)");
}

void refuse_transformer_engine_tensor(const Value& value, const std::string& where) {
    if (value.kind != Kind::Object || !value.callable) return;
    // Its __reduce_ex__ pickles getattr(<TE class>, "_make_in_reduce_ex")(data, fp8_dtype, scale_inv, dtype, shape).
    const Value* made_by = value.callable.get();
    if (made_by->kind == Kind::Object && made_by->callable && pickle::is_global(*made_by->callable, "builtins", "getattr") &&
        made_by->args && made_by->args->kind == Kind::Tuple && !made_by->args->items.empty())
        made_by = made_by->args->items[0].get();
    if (made_by->kind != Kind::Global || !made_by->module.starts_with("transformer_engine")) return;
    fail(where, "a Transformer Engine " + made_by->name + " (" + made_by->module +
                    ": FP8 codes with their scale_inv, a Megatron --fp8-param-gather parameter), which vmerge does "
                    "not read; load the checkpoint with Megatron, whose dist_checkpointing.load dequantizes FP8 "
                    "parameters, and save it without --fp8-param-gather");
}

std::string float8_item_metadata(const Float8ItemFacts& facts) {
    nlohmann::json j;
    j["tensor_subclass"] = facts.subclass;
    j["dtype"] = std::string(torch_name(facts.dtype));
    j["shape"] = facts.shape;
    j["block_size"] = facts.block_size;
    return j.dump();
}

std::optional<Float8ItemFacts> parse_float8_item_metadata(const std::string& metadata, const std::string& where) {
    if (metadata.empty()) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(metadata, nullptr, false);
    if (!j.is_object() || !j.contains("tensor_subclass")) return std::nullopt;
    Float8ItemFacts facts;
    try {
        facts.subclass = j.at("tensor_subclass").get<std::string>();
        const auto dtype = dtype_from_torch_name(j.at("dtype").get<std::string>());
        if (!dtype) throw Error("dtype");
        facts.dtype = *dtype;
        facts.shape = j.at("shape").get<Shape>();
        facts.block_size = j.at("block_size").get<Shape>();
    } catch (const std::exception&) {
        fail(where, "malformed float8 item facts " + metadata);
    }
    return facts;
}

bool scan_torchao_float8_item(const Value& top, const ZipArchive& archive, const InputFile& file, const std::string& where,
                              ScannedFile& out) {
    const Value* args = rebuild_from_type_args(top);
    if (!args || !is_torchao_float8_tensor(*args->items[1])) return false;
    if (!pickle::is_global(*args->items[0], "torch._utils", "_rebuild_wrapper_subclass"))
        fail(where, "a torchao Float8Tensor not pickled as a wrapper subclass");
    const Value& cls = *args->items[1];
    Float8ItemFacts facts;
    facts.subclass = cls.module + "." + cls.name;
    read_wrapper(*args->items[2], facts, where);
    const Value& state = *args->items[3];
    TensorRef codes = slot_tensor(state, kFloat8CodesKey, archive, file, where);
    TensorRef scale = slot_tensor(state, kFloat8ScaleKey, archive, file, where);
    facts.block_size = torch_size_of(slot(state, "block_size", where), where + " (Float8Tensor block_size)");
    check_float8_parts(facts, codes, scale, where);
    out.tensors.push_back({kFloat8CodesKey, std::move(codes), 0});
    out.tensors.push_back({kFloat8ScaleKey, std::move(scale), 0});
    out.metadata = float8_item_metadata(facts);
    return true;
}

}  // namespace vmerge
