#include "exec/dtype_cast.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/vector_clones.h"

namespace vmerge {

uint16_t f32_to_bf16(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    // torch's vectorised CPU conversion (what .to(torch.bfloat16) runs on a CPU tensor, as
    // the Python merger does) writes 0xFFFF for every NaN; match it bit for bit.
    if (std::isnan(value)) return 0xFFFF;
    const uint32_t rounding_bias = 0x7FFF + ((bits >> 16) & 1);
    return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_f16(float value) {
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

float f16_to_f32(uint16_t h) {
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

bool can_cast(DType from, DType to) {
    auto castable = [](DType t) {
        return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
    };
    return from == to || (castable(from) && castable(to));
}

namespace {

float load_as_f32(const unsigned char* p, DType from) {
    switch (from) {
        case DType::F32: { float f; std::memcpy(&f, p, 4); return f; }
        case DType::F64: { double d; std::memcpy(&d, p, 8); return static_cast<float>(d); }
        case DType::F16: { uint16_t h; std::memcpy(&h, p, 2); return f16_to_f32(h); }
        case DType::BF16: { uint16_t b; std::memcpy(&b, p, 2); return bf16_to_f32(b); }
        default: return 0.0f;
    }
}

double load_as_f64(const unsigned char* p, DType from) {
    if (from == DType::F64) { double d; std::memcpy(&d, p, 8); return d; }
    return static_cast<double>(load_as_f32(p, from));
}

// The casts every merge of fp32 masters runs (fp32 -> bf16, and bf16 -> fp32 for LoRA) as
// loops without calls or branches, which the compiler vectorises: the general path below goes
// element by element through a switch, about ten times slower (docs/performance.md). AVX2
// clones: integer operations only, the same bits in every clone; 12 -> 19 GB/s of fp32 in.
VMERGE_VECTOR_CLONES void f32_to_bf16_run(const unsigned char* in, unsigned char* out, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        uint32_t bits;
        std::memcpy(&bits, in + 4 * i, 4);
        const uint32_t rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
        // Every NaN as 0xFFFF, as f32_to_bf16 (and torch) writes it.
        const uint16_t b = static_cast<uint16_t>((bits & 0x7FFFFFFF) > 0x7F800000 ? 0xFFFF : rounded);
        std::memcpy(out + 2 * i, &b, 2);
    }
}

VMERGE_VECTOR_CLONES void bf16_to_f32_run(const unsigned char* in, unsigned char* out, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        uint16_t b;
        std::memcpy(&b, in + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(b) << 16;
        std::memcpy(out + 4 * i, &bits, 4);
    }
}

}  // namespace

void cast_elements(const void* src, DType from, void* dst, DType to, size_t count) {
    if (!can_cast(from, to))
        throw Error("cannot cast " + std::string(torch_name(from)) + " to " + std::string(torch_name(to)));
    if (from == to) {
        std::memcpy(dst, src, count * element_size(from));
        return;
    }
    const auto* in = static_cast<const unsigned char*>(src);
    auto* out = static_cast<unsigned char*>(dst);
    if (from == DType::F32 && to == DType::BF16) return f32_to_bf16_run(in, out, count);
    if (from == DType::BF16 && to == DType::F32) return bf16_to_f32_run(in, out, count);
    const size_t in_size = element_size(from);
    for (size_t i = 0; i < count; ++i, in += in_size) {
        switch (to) {
            case DType::F64: { double d = load_as_f64(in, from); std::memcpy(out + 8 * i, &d, 8); break; }
            case DType::F32: { float f = load_as_f32(in, from); std::memcpy(out + 4 * i, &f, 4); break; }
            case DType::BF16: { uint16_t b = f32_to_bf16(load_as_f32(in, from)); std::memcpy(out + 2 * i, &b, 2); break; }
            case DType::F16: { uint16_t h = f32_to_f16(load_as_f32(in, from)); std::memcpy(out + 2 * i, &h, 2); break; }
            default: break;
        }
    }
}

}  // namespace vmerge

namespace vmerge {

void round_through(const void* src, DType from, DType through, float* dst, size_t count) {
    if (from == DType::F32 && through == DType::BF16) {
        const auto* in = static_cast<const unsigned char*>(src);
        for (size_t i = 0; i < count; ++i) {
            float f;
            std::memcpy(&f, in + 4 * i, 4);
            dst[i] = bf16_to_f32(f32_to_bf16(f));
        }
        return;
    }
    if (from == DType::BF16 && (through == DType::BF16 || through == DType::F32)) {  // exact
        const auto* in = static_cast<const unsigned char*>(src);
        for (size_t i = 0; i < count; ++i) {
            uint16_t b;
            std::memcpy(&b, in + 2 * i, 2);
            dst[i] = bf16_to_f32(b);
        }
        return;
    }
    if (from == DType::F32 && through == DType::F32) {
        if (src == dst) return;
        cast_elements(src, from, dst, DType::F32, count);  // exact: no rounding step
        return;
    }
    std::vector<unsigned char> rounded(count * element_size(through));
    cast_elements(src, from, rounded.data(), through, count);
    cast_elements(rounded.data(), through, dst, DType::F32, count);
}

}  // namespace vmerge
