#pragma once
// An fp32 tensor in memory as a SourceReader: the executor tests' source without a file.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/source_reader.h"

namespace vmerge::testing {

class FloatMemorySource final : public SourceReader {
public:
    explicit FloatMemorySource(const std::vector<float>& values) : values_(values) {}
    void read_exact(uint64_t offset, void* out, uint64_t length, const char*) const override {
        if (offset + length > values_.size() * 4) throw Error("read outside the fake source");
        std::memcpy(out, reinterpret_cast<const unsigned char*>(values_.data()) + offset, length);
    }

private:
    const std::vector<float>& values_;  // the test's, outliving the source
};

}  // namespace vmerge::testing
