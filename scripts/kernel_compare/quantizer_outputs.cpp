// Prints a hash of the codes and scales every FP8 and 4-bit float quantizer writes for one
// 2048 x 8192 weight of hostile values, in the weight dtype given (bf16, f16 or f32), or the
// message it refuses the weight with. Built twice by compare_quantizer_kernels.sh, against the
// kernels of two revisions, so that their lines can be compared: a kernel change must not move a
// byte. The error statistics are printed apart (their float sums may be reassociated).
#include <bit>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "exec/fp4_quantize.h"
#include "exec/fp8_quantize.h"

using namespace vmerge;

namespace {

constexpr int64_t kRows = 2048, kCols = 8192;

uint64_t fnv1a(const void* data, size_t n) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return h;
}

// Rows of eight kinds: random exponents over most of the float range, float32 subnormals, zeros
// and -0 with tiny values, large values, the E2M1/E4M3 tie points, groups that are all zero,
// values near float16's largest; the rest normal(0, 0.02). Every value is exact in `dtype` and
// finite (a value float16 cannot hold becomes 0).
std::vector<float> hostile_weight(DType dtype) {
    std::vector<float> x(static_cast<size_t>(kRows * kCols));
    std::mt19937 random(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (size_t i = 0; i < x.size(); ++i) {
        const uint32_t bits = random();
        float v = normal(random);
        switch ((i / kCols) % 8) {
            case 0: v = std::bit_cast<float>((bits & 0x807FFFFFu) | ((bits >> 8) % 201u) << 23); break;
            case 1: v = std::bit_cast<float>(bits & 0x807FFFFFu); break;
            case 2: v = (bits & 7) == 0 ? -0.0f : (bits & 7) == 1 ? 0.0f : v * 1e-30f; break;
            case 3: v *= 1e4f; break;
            case 4: v = static_cast<float>(static_cast<int>(bits % 13) - 6) * 0.25f; break;
            case 5: v = (i / 16) % 3 == 0 ? 0.0f : v * 1e-6f; break;
            case 6: v *= 3e4f; break;
            default: break;
        }
        if (dtype == DType::BF16) v = bf16_to_f32(f32_to_bf16(v));
        if (dtype == DType::F16) v = f16_to_f32(f32_to_f16(v));
        x[i] = std::isfinite(v) ? v : 0.0f;
    }
    return x;
}

void report(const char* kernel, const std::function<void(QuantError&)>& run, const std::vector<uint8_t>& codes,
            const std::vector<uint8_t>& scales) {
    QuantError error;
    try {
        run(error);
        std::printf("%-12s codes %016llx scales %016llx\n", kernel, static_cast<unsigned long long>(fnv1a(codes.data(), codes.size())),
                    static_cast<unsigned long long>(fnv1a(scales.data(), scales.size())));
        std::fprintf(stderr, "%-12s error sum %.9g max %.9g\n", kernel, error.sum, error.max);
    } catch (const std::exception& e) {
        std::printf("%-12s refused: %s\n", kernel, e.what());
    }
}

}  // namespace

int main(int argc, char** argv) {
    const std::string name = argc > 1 ? argv[1] : "bf16";
    const DType dtype = name == "f16" ? DType::F16 : name == "f32" ? DType::F32 : DType::BF16;
    const std::vector<float> x = hostile_weight(dtype);
    const std::string tensor = "model.layers.0.mlp.up_proj.weight";
    const size_t n = x.size();
    std::vector<uint8_t> packed(n / 2), fp8(n), nv_scales(n / 16), mx_scales(n / 32);
    std::vector<uint8_t> block_scales(static_cast<size_t>(kRows / 128 * kCols / 128) * 4), row_scales(kRows * 4);
    for (const float amax : {0.1f, 5e4f}) {
        const float g = nvfp4_global_scale(amax, dtype);
        report(amax < 1 ? "nvfp4" : "nvfp4.g_small", [&](QuantError& e) {
            quantize_nvfp4_rows(x.data(), kRows, kCols, dtype, g, packed.data(), nv_scales.data(), e, tensor, 0);
        }, packed, nv_scales);
    }
    report("mxfp4", [&](QuantError& e) {
        quantize_mxfp4_rows(x.data(), kRows, kCols, dtype, packed.data(), mx_scales.data(), e, tensor, 0);
    }, packed, mx_scales);
    for (const auto format : {Fp8ScaleFormat::Float, Fp8ScaleFormat::Ue8m0})
        report(format == Fp8ScaleFormat::Float ? "fp8" : "fp8.ue8m0", [&](QuantError& e) {
            quantize_fp8_blocks(x.data(), kRows, kCols, format, fp8.data(), reinterpret_cast<float*>(block_scales.data()),
                                e, tensor, 0);
        }, fp8, block_scales);
    report("fp8-block", [&](QuantError& e) {
        quantize_fp8_ct_blocks(x.data(), kRows, kCols, dtype, fp8.data(), block_scales.data(), e, tensor, 0);
    }, fp8, block_scales);
    report("fp8-dynamic", [&](QuantError& e) {
        quantize_fp8_channels(x.data(), kRows, kCols, dtype, fp8.data(), row_scales.data(), e, tensor, 0);
    }, fp8, row_scales);
    return 0;
}
