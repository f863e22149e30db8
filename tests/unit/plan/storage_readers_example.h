#pragma once
// A small mapping with its scans and a three-rank plan, the readers of every record worked out
// by hand: shared by the storage_readers tests (plan/) and the scan routing tests (mpi/).
// Records are at bytes 100, 200, 300, 400 of each file, in the order listed:
//   f0.pt: a (rows 0-1 of A), b (rows 0-1 of B), c (all of C), unused (read by nothing)
//   f1.pt: a (rows 2-3 of A), b (rows 2-3 of B), la and lb (C's LoRA factors)
//   rank 0 writes A rows 0-1; rank 1 A rows 1-4 and B row 0; rank 2 B rows 1-4 and C.
#include <string>
#include <vector>

#include "core/tensor_mapping.h"
#include "plan/rank_work.h"

namespace vmerge::testing {

// A record of `file` at byte `offset` (record keys repeat across the archives of a .distcp file;
// the offset tells records apart).
inline TensorRef stored(const std::string& file, const std::string& record, uint64_t offset, Shape shape) {
    TensorRef t;
    t.dtype = DType::BF16;
    t.stride = contiguous_strides(shape);
    t.shape = std::move(shape);
    t.storage.file = file;
    t.storage.key = record;
    t.storage.byte_offset = offset;
    return t;
}

struct RoutingExample {
    std::vector<ScannedFile> scans;
    TensorMapping mapping;
    std::vector<std::vector<WriteTask>> work;
};

inline RoutingExample routing_example() {
    RoutingExample x;
    const TensorRef f0a = stored("f0.pt", "data/0", 100, {2, 2}), f0b = stored("f0.pt", "data/1", 200, {2, 2}),
                    f0c = stored("f0.pt", "data/2", 300, {2, 2}), f0u = stored("f0.pt", "data/3", 400, {5});
    const TensorRef f1a = stored("f1.pt", "data/0", 100, {2, 2}), f1b = stored("f1.pt", "data/1", 200, {2, 2}),
                    f1la = stored("f1.pt", "data/2", 300, {1, 2}), f1lb = stored("f1.pt", "data/3", 400, {2, 1});
    x.scans.resize(2);
    x.scans[0].path = "f0.pt";
    x.scans[0].tensors = {{"a", f0a}, {"b", f0b}, {"c", f0c}, {"unused", f0u}};
    x.scans[0].skipped = {{"step", "int"}};
    x.scans[1].path = "f1.pt";
    x.scans[1].tensors = {{"a", f1a}, {"b", f1b}, {"c.lora_A", f1la}, {"c.lora_B", f1lb}};
    x.mapping.sources = {f0a, f1a, f0b, f1b, f0c, f1la, f1lb};
    auto halves = [](const std::string& name, uint32_t top, uint32_t bottom) {
        OutputTensor t;
        t.name = name;
        t.shape = {4, 2};
        t.copies = {{top, {0, 0}, {0, 0}, {2, 2}}, {bottom, {0, 0}, {2, 0}, {2, 2}}};
        return t;
    };
    OutputTensor c;
    c.name = "C";
    c.shape = {2, 2};
    c.copies = {{4, {0, 0}, {0, 0}, {2, 2}}};
    c.lora_delta = 0;
    LoraDelta delta;
    delta.a.shape = {1, 2};
    delta.a.copies = {{5, {0, 0}, {0, 0}, {1, 2}}};
    delta.b.shape = {2, 1};
    delta.b.copies = {{6, {0, 0}, {0, 0}, {2, 1}}};
    x.mapping.tensors = {halves("A", 0, 1), halves("B", 2, 3), c};
    x.mapping.lora_deltas = {delta};
    x.work = {{{0, 0, 1}}, {{0, 1, 4}, {1, 0, 1}}, {{1, 1, 4}, {2, 0, 2}}};
    return x;
}

}  // namespace vmerge::testing
