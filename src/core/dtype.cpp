#include "core/dtype.h"

#include <array>

namespace vmerge {
namespace {

struct DTypeInfo {
    DType dtype;
    size_t size;
    std::string_view safetensors;
    std::string_view torch;
    std::string_view storage_class;
    bool floating;
};

constexpr std::array<DTypeInfo, 16> kTable{{
    {DType::F64, 8, "F64", "float64", "DoubleStorage", true},
    {DType::F32, 4, "F32", "float32", "FloatStorage", true},
    {DType::F16, 2, "F16", "float16", "HalfStorage", true},
    {DType::BF16, 2, "BF16", "bfloat16", "BFloat16Storage", true},
    {DType::I64, 8, "I64", "int64", "LongStorage", false},
    {DType::I32, 4, "I32", "int32", "IntStorage", false},
    {DType::I16, 2, "I16", "int16", "ShortStorage", false},
    {DType::I8, 1, "I8", "int8", "CharStorage", false},
    {DType::U8, 1, "U8", "uint8", "ByteStorage", false},
    {DType::BOOL, 1, "BOOL", "bool", "BoolStorage", false},
    {DType::F8_E4M3, 1, "F8_E4M3", "float8_e4m3fn", "", true},
    {DType::F8_E5M2, 1, "F8_E5M2", "float8_e5m2", "", true},
    {DType::U16, 2, "U16", "uint16", "", false},
    {DType::U32, 4, "U32", "uint32", "", false},
    {DType::U64, 8, "U64", "uint64", "", false},
    {DType::C64, 8, "C64", "complex64", "ComplexFloatStorage", false},
}};

const DTypeInfo& info(DType dtype) {
    for (const auto& entry : kTable)
        if (entry.dtype == dtype) return entry;
    return kTable[0];
}

}  // namespace

size_t element_size(DType dtype) { return info(dtype).size; }
std::string_view safetensors_name(DType dtype) { return info(dtype).safetensors; }
std::string_view torch_name(DType dtype) { return info(dtype).torch; }
bool is_floating(DType dtype) { return info(dtype).floating; }

std::optional<DType> dtype_from_safetensors(std::string_view name) {
    for (const auto& entry : kTable)
        if (entry.safetensors == name) return entry.dtype;
    return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
    if (name.starts_with("torch.")) name.remove_prefix(6);
    if (name == "float") return DType::F32;
    if (name == "half") return DType::F16;
    if (name == "double") return DType::F64;
    if (name == "long") return DType::I64;
    if (name == "int") return DType::I32;
    for (const auto& entry : kTable)
        if (entry.torch == name) return entry.dtype;
    return std::nullopt;
}

std::optional<DType> dtype_from_storage_class(std::string_view class_name) {
    for (const auto& entry : kTable)
        if (!entry.storage_class.empty() && entry.storage_class == class_name) return entry.dtype;
    return std::nullopt;
}

}  // namespace vmerge
