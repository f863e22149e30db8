#include "exec/quantization_scale.h"

#include "exec/dtype_cast.h"

namespace vmerge {

float scale_eps(DType dtype) {
    switch (dtype) {
        case DType::BF16: return 0.0078125f;          // 2^-7
        case DType::F16: return 0.0009765625f;        // 2^-10
        default: return 1.1920928955078125e-07f;      // 2^-23
    }
}

float store_scale(float computed, DType dtype, unsigned char* stored) {
    cast_elements(&computed, DType::F32, stored, dtype, 1);
    float value;
    cast_elements(stored, dtype, &value, DType::F32, 1);
    if (value != 0.0f) return value;
    value = scale_eps(dtype);  // exact in every scale dtype
    cast_elements(&value, DType::F32, stored, dtype, 1);
    return value;
}

}  // namespace vmerge
