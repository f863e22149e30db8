#include "exec/reference_compare.h"

#include <cmath>
#include <cstring>

#include "exec/dtype_cast.h"

namespace vmerge {

std::optional<DType> comparison_dtype(DType merged, DType reference) {
    if (merged == reference) return merged;
    const DType narrow = element_size(reference) < element_size(merged) ? reference : merged;
    if (!can_cast(merged, narrow) || !can_cast(reference, narrow)) return std::nullopt;
    return narrow;
}

bool values_match(const unsigned char* a, const unsigned char* b, DType dtype, size_t count, double atol, double rtol,
                  size_t* first_bad) {
    const size_t esize = element_size(dtype);
    for (size_t i = 0; i < count; ++i) {
        if (std::memcmp(a + i * esize, b + i * esize, esize) == 0) continue;
        if ((atol > 0 || rtol > 0) && is_floating(dtype) && can_cast(dtype, DType::F64)) {
            double x, y;
            cast_elements(a + i * esize, dtype, &x, DType::F64, 1);
            cast_elements(b + i * esize, dtype, &y, DType::F64, 1);
            if ((std::isnan(x) && std::isnan(y)) || std::fabs(x - y) <= atol + rtol * std::fabs(y)) continue;
        }
        *first_bad = i;
        return false;
    }
    return true;
}

const unsigned char* CastComparison::as(const unsigned char* data, DType from, DType to, size_t count,
                                        std::vector<unsigned char>& buffer) {
    if (from == to) return data;
    buffer.resize(count * element_size(to));
    cast_elements(data, from, buffer.data(), to, count);
    return buffer.data();
}

bool CastComparison::match(const unsigned char* merged, DType merged_dtype, const unsigned char* reference,
                           DType reference_dtype, DType compare, size_t count, double atol, double rtol,
                           size_t* first_bad) {
    return values_match(as(merged, merged_dtype, compare, count, merged_), as(reference, reference_dtype, compare, count, reference_),
                        compare, count, atol, rtol, first_bad);
}

}  // namespace vmerge
