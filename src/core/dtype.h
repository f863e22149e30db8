#pragma once
#include <bit>
#include <cmath>
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

// Whether a cast converts `from` into `to` (floating types among F64/F32/F16/BF16, or
// identical types): the output rules ask it when they choose a dtype, the executor before it casts.
inline bool can_cast(DType from, DType to) {
    auto castable = [](DType t) {
        return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
    };
    return from == to || (castable(from) && castable(to));
}

// The scalar conversions the casts and quantizers share. Inline: the executor's element loops
// call them once per element.
inline uint16_t f32_to_bf16(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    // torch's vectorised CPU conversion (what .to(torch.bfloat16) runs on a CPU tensor, as
    // the Python merger does) writes 0xFFFF for every NaN; match it bit for bit.
    if (std::isnan(value)) return 0xFFFF;
    const uint32_t rounding_bias = 0x7FFF + ((bits >> 16) & 1);
    return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

inline uint16_t f32_to_f16(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
    const uint32_t abs = bits & 0x7FFFFFFF;
    if (abs > 0x7F800000) return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x3FF);  // NaN
    if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds to >= 65520: infinity
    if (abs < 0x38800000) {
        // Result is subnormal (or zero): value = m * 2^-24, round the shifted mantissa.
        if (abs < 0x33000000) return sign;  // below half the smallest subnormal
        const uint32_t exponent = abs >> 23;
        const uint32_t mantissa = (abs & 0x7FFFFF) | 0x800000;
        const uint32_t shift = 126 - exponent;  // 14..24 for exponents in range
        uint32_t half = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1);
        const uint32_t midpoint = 1u << (shift - 1);
        if (rest > midpoint || (rest == midpoint && (half & 1))) ++half;
        return sign | static_cast<uint16_t>(half);
    }
    uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);
    rounded -= 0x38000000;  // rebias exponent 127 -> 15
    return sign | static_cast<uint16_t>(rounded >> 13);
}

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1F;
    const uint32_t mantissa = h & 0x3FF;
    if (exponent == 0) {
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000 | (mantissa << 13));
    return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace vmerge
