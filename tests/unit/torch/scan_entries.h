#pragma once
// A scanned state-dict entry built by hand, for the scan serialization and exchange tests.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/tensor_ref.h"

namespace vmerge::testing {

// A bf16 tensor `key`, contiguous, stored in record `storage_key` of `file` at `offset`.
inline StateDictEntry entry(std::string key, const std::string& file, std::string storage_key, Shape shape, uint64_t offset,
                     uint64_t size) {
    StateDictEntry e;
    e.key = std::move(key);
    e.tensor.dtype = DType::BF16;
    e.tensor.stride = contiguous_strides(shape);
    e.tensor.shape = std::move(shape);
    e.tensor.storage = {file, std::move(storage_key), offset, size, std::nullopt};
    return e;
}

}  // namespace vmerge::testing
