#include "core/tensor_ref.h"

#include <algorithm>

#include "core/error.h"

namespace vmerge {

int64_t numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string shape_to_string(const Shape& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

std::string placement_to_string(const Placement& p) {
    switch (p.kind) {
        case Placement::Kind::Shard: return "Shard(" + std::to_string(p.dim) + ")";
        case Placement::Kind::StridedShard:
            return "_StridedShard(" + std::to_string(p.dim) + ", split_factor=" +
                   std::to_string(p.split_factor) + ")";
        case Placement::Kind::Replicate: return "Replicate()";
        case Placement::Kind::Partial: return "Partial(" + p.reduce_op + ")";
    }
    return "?";
}

TensorRef select_dim(const TensorRef& t, size_t dim, int64_t index) {
    TensorRef view = t;
    view.storage_offset += index * t.stride[dim];
    view.shape.erase(view.shape.begin() + static_cast<std::ptrdiff_t>(dim));
    view.stride.erase(view.stride.begin() + static_cast<std::ptrdiff_t>(dim));
    view.dtensor.reset();
    return view;
}

std::optional<int64_t> checked_numel(const Shape& shape) {
    int64_t count = 1;
    for (int64_t d : shape)
        if (__builtin_mul_overflow(count, d, &count)) return std::nullopt;
    return count;
}

Shape contiguous_strides(const Shape& shape) {
    Shape strides(shape.size(), 1);
    // A shape whose numel is 0 can still have dimensions whose product overflows int64 (found
    // by fuzzing): refused here rather than wrapped around.
    for (size_t d = shape.size(); d-- > 1;)
        if (__builtin_mul_overflow(strides[d], std::max<int64_t>(shape[d], 1), &strides[d - 1]))
            throw Error("tensor shape " + shape_to_string(shape) + ": its contiguous strides exceed 64 bits");
    return strides;
}

bool TensorRef::is_contiguous() const {
    int64_t expected = 1;
    for (size_t i = shape.size(); i-- > 0;) {
        if (shape[i] != 1 && stride[i] != expected) return false;
        if (__builtin_mul_overflow(expected, shape[i], &expected)) return false;  // no stride can say it
    }
    return true;
}

}  // namespace vmerge
