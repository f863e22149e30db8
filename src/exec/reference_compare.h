#pragma once
#include <cstddef>
#include <optional>
#include <vector>

#include "core/dtype.h"

namespace vmerge {

// `test` compares a merge with a reference folder that may store tensors in another dtype
// (verl's test casts the reference to the merged dtype first). The comparison dtype of a merged
// tensor and its reference: their dtype when they agree; otherwise the narrower one (an fp32
// reference of a bf16 merge is rounded to bf16, round to nearest even, as the merge itself
// rounds), the merged dtype when both are as wide; nullopt when either cannot be cast to it.
std::optional<DType> comparison_dtype(DType merged, DType reference);

// Values equal within tolerance; NaN equals NaN. Exact byte equality when both are zero.
// On a difference, *first_bad is the first differing element.
bool values_match(const unsigned char* a, const unsigned char* b, DType dtype, size_t count, double atol, double rtol,
                  size_t* first_bad);

// `count` elements of `merged` (in `merged_dtype`) and `reference` (in `reference_dtype`),
// compared after casting both to `compare` (comparison_dtype).
class CastComparison {
public:
    bool match(const unsigned char* merged, DType merged_dtype, const unsigned char* reference, DType reference_dtype,
               DType compare, size_t count, double atol, double rtol, size_t* first_bad);

private:
    const unsigned char* as(const unsigned char* data, DType from, DType to, size_t count, std::vector<unsigned char>& buffer);
    std::vector<unsigned char> merged_, reference_;
};

}  // namespace vmerge
