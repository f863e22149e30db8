#include "exec/finite_weights.h"

#include <cmath>

#include "core/error.h"
#include "core/vector_clones.h"

namespace vmerge {
namespace {

// The largest of `count` 16-bit magnitudes (sign bit cleared), an integer max that vectorises.
VMERGE_VECTOR_CLONES uint16_t max_half_magnitude(const uint16_t* values, size_t count) {
    uint16_t top = 0;
    for (size_t i = 0; i < count; ++i) top = std::max<uint16_t>(top, values[i] & 0x7FFFu);
    return top;
}

VMERGE_VECTOR_CLONES uint32_t max_float_magnitude(const float* values, size_t count) {
    return max_magnitude_bits(values, static_cast<int64_t>(count));
}


// As torch and numpy print them.
std::string value_text(float value) {
    if (std::isnan(value)) return "nan";
    return value < 0 ? "-inf" : "inf";
}

std::string module_of_weight(const std::string& tensor) {
    return tensor.ends_with(".weight") ? tensor.substr(0, tensor.size() - 7) : tensor;
}

// Why the value must be finite, and what the user can do instead.
std::string reason(const WeightPlace& place) {
    switch (place.use) {
        case WeightUse::LoraFactor:
            return "a LoRA factor must be finite to be folded (B·A would carry it into whole rows of the merged "
                   "weight); merge with --extract_lora to write the adapter apart, as it is";
        case WeightUse::LoraBase:
            return "a weight must be finite to have a LoRA update folded into it; merge with --extract_lora to write "
                   "the base model and the adapter apart, as they are";
        case WeightUse::LoraResult:
            return "the LoRA fold W + scale·B·A overflows float32 there, although W, A and B are finite; merge with "
                   "--extract_lora to write the base model and the adapter apart, as they are";
        case WeightUse::Quantize:
            break;
    }
    return "a weight must be finite to be quantized (no scale represents it); merge without --quantize to keep the "
           "weights as they are, or leave the module out with --quantize_ignore " + module_of_weight(place.tensor);
}

// The first of `rows` rows holding a non-finite value, or `rows`.
VMERGE_VECTOR_CLONES int64_t first_non_finite_row(const float* x, int64_t rows, int64_t cols, int64_t stride) {
    for (int64_t r = 0; r < rows; ++r)
        if (max_magnitude_bits(x + r * stride, cols) >= kNonFiniteMagnitude) return r;
    return rows;
}

}  // namespace

std::string non_finite_message(const WeightPlace& place, int64_t row, int64_t column, float value) {
    return place.tensor + ": row " + std::to_string(row) + ", column " + std::to_string(column) + " is " +
           value_text(value) + "; " + reason(place);
}

void require_finite(const float* x, int64_t rows, int64_t cols, int64_t stride, const WeightPlace& place) {
    const int64_t r = first_non_finite_row(x, rows, cols, stride);
    if (r == rows) return;
    const float* row = x + r * stride;
    for (int64_t c = 0; c < cols; ++c)
        if (!std::isfinite(row[c])) throw InputValueError(non_finite_message(place, place.first_row + r, c, row[c]));
}

std::optional<uint32_t> stored_max_magnitude_bits(const unsigned char* data, DType dtype, size_t count) {
    if (dtype == DType::F32) return max_float_magnitude(reinterpret_cast<const float*>(data), count);
    if (dtype != DType::BF16 && dtype != DType::F16) return std::nullopt;
    const uint16_t top = max_half_magnitude(reinterpret_cast<const uint16_t*>(data), count);
    return std::bit_cast<uint32_t>(dtype == DType::BF16 ? bf16_to_f32(top) : f16_to_f32(top));
}

}  // namespace vmerge
