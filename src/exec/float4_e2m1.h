#pragma once
#include <cmath>
#include <cstdint>

namespace vmerge {

// FP4 E2M1, the element of NVFP4 and MXFP4 (docs/reference/lowbit-formats.md §1.1): a sign bit
// (0x8) over a 3-bit magnitude code 0..7 for 0, 0.5, 1, 1.5, 2, 3, 4, 6. No infinity, no NaN.

// The code compressed-tensors' CPU quantizer gives the scaled value t (finite, binary32): t is
// clamped to ±6 and its magnitude rounded by the thresholds of `cast_to_fp4` (a tie goes to the
// even code: 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); the sign
// bit is that of the rounded value times sign(t), so it is set exactly when t < 0: a small
// negative t gives -0 (0x8), while t = -0.0 gives +0 (torch.sign(-0.0) is +0).
// Each comparison adds one step, without branches, so the quantizer's loops vectorise.
inline uint8_t e2m1_code(float t) {
    const float m = std::fabs(t);
    const int magnitude = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) +
                          (m > 5.0f);
    return static_cast<uint8_t>(magnitude | (static_cast<int>(t < 0.0f) << 3));
}

// The value of a code (0x8 is -0.0).
inline float e2m1_value(uint8_t code) {
    static constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float magnitude = kMagnitudes[code & 0x7];
    return (code & 0x8) ? -magnitude : magnitude;
}

}  // namespace vmerge
