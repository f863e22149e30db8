#include "exec/dtype_cast.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/vector_clones.h"

namespace vmerge {

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
