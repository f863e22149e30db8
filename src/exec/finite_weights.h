#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace vmerge {

// The Error of a refused input value (a NaN weight to quantize or fold): the same input fails the
// same way on every rerun, so output staged before it is not worth a --resume (the driver
// discards it, as for a CRC mismatch).
class InputValueError : public Error {
public:
    using Error::Error;
};

// The one rule every quantizer (int4/int8, block FP8, FP8_DYNAMIC) and the LoRA fold apply to the
// values they compute with (docs/quantization.md, "NaN, infinity and tiny scales"): NaN or ±Inf
// has no scale and makes a fold's rows NaN, so it stops the merge with an Error naming the
// tensor, the row, the column and the value, on the reading thread, before anything is committed.

// What the values are about to be used for; it picks the message's reason and remedy.
enum class WeightUse {
    Quantize,    // a weight --quantize is about to quantize (the value as the unquantized merge writes it)
    LoraFactor,  // lora_A or lora_B of a --merge_lora fold
    LoraBase,    // the weight a LoRA update is folded into
    LoraResult,  // W + scale·B·A, where finite W, A and B overflowed float32
};

// Where a block of values lies in its tensor, for the message.
struct WeightPlace {
    const std::string& tensor;  // the name the user knows: the output weight, or the adapter's key
    int64_t first_row = 0;      // the tensor row of the block's first row
    WeightUse use = WeightUse::Quantize;
};

// NaN and ±Inf are the float bit patterns whose magnitude (sign cleared) is at least this.
constexpr uint32_t kNonFiniteMagnitude = 0x7F800000u;

// The largest |w| of n values as its bit pattern: the bits of non-negative floats order as their
// values and NaN/Inf lie at or above kNonFiniteMagnitude, so one integer max (which vectorises,
// where a float max without -ffinite-math-only does not) gives the amax and finds every
// non-finite value. Inline, so the quantizers' vector clones inline it into their loops.
inline uint32_t max_magnitude_bits(const float* w, int64_t n) {
    uint32_t top = 0;
    for (int64_t c = 0; c < n; ++c) top = std::max(top, std::bit_cast<uint32_t>(w[c]) & 0x7FFFFFFFu);
    return top;
}

// The largest |w| of `count` values stored in `dtype`, as a binary32's bits, read from the stored
// bits without converting each value: the bits of a magnitude order as its values in F32, BF16
// and F16 alike, and NaN/Inf lie above every finite one there too, so the result is at or above
// kNonFiniteMagnitude exactly when a value is not finite. nullopt for another dtype. Compiled as
// vector clones (NVFP4's global-scale pass runs it over every quantized weight).
std::optional<uint32_t> stored_max_magnitude_bits(const unsigned char* data, DType dtype, size_t count);

// Returns when the `rows` x `cols` values at `x` (rows `stride` floats apart) are all finite;
// otherwise throws the Error (an InputValueError: a rerun fails alike, so nothing is kept for
// --resume) for the first non-finite one in row-major order:
//   "<tensor>: row R, column C is nan|inf|-inf; <why it must be finite>; <what to do instead>"
void require_finite(const float* x, int64_t rows, int64_t cols, int64_t stride, const WeightPlace& place);

// The message require_finite throws for `value` at (row, column), for tests and for callers
// that found it themselves.
std::string non_finite_message(const WeightPlace& place, int64_t row, int64_t column, float value);

}  // namespace vmerge
