#pragma once
#include <cstdint>

namespace vmerge {

// float8_e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinity; 0x7F/0xFF
// are NaN; largest finite 448 = 0x7E), converted exactly as torch's c10 routine does
// (fp8-formats.md §1): round to nearest, ties to the even mantissa, in the normal and the
// subnormal range alike, and NOT saturating: |v| >= 480, ±Inf and NaN give the NaN code, and so
// do values in (464, 480), which round up onto it. The sign bit is always copied.
uint8_t e4m3fn_from_float(float value);

// What every quantizer writes: the value clamped to [-448, 448] first, so that no finite value
// ever becomes the NaN code (values above 448 that round to 448 anyway give the same byte).
// NaN stays NaN (callers refuse non-finite weights before they get here).
uint8_t e4m3fn_from_float_clamped(float value);

float e4m3fn_to_float(uint8_t code);

}  // namespace vmerge
