#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vmerge {

enum class DType : uint8_t {
    F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL,
    F8_E4M3, F8_E5M2, U16, U32, U64, C64,
};

size_t element_size(DType dtype);
// safetensors dtype string ("F32", "BF16", ...).
std::string_view safetensors_name(DType dtype);
std::optional<DType> dtype_from_safetensors(std::string_view name);
// torch names: "float32", "bfloat16", ... (also "float", "half" aliases of config files).
std::optional<DType> dtype_from_torch_name(std::string_view name);
// legacy storage classes: "FloatStorage" -> F32.
std::optional<DType> dtype_from_storage_class(std::string_view class_name);
std::string_view torch_name(DType dtype);
bool is_floating(DType dtype);

}  // namespace vmerge
