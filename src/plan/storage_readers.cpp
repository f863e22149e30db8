#include "plan/storage_readers.h"

#include "plan/rank_inputs.h"

namespace vmerge {
namespace {

// Adds `rank` to the record's readers; ranks are visited in ascending order, so a repeat is
// always the last entry.
void add_reader(StorageReaders& readers, const TensorRef& source, int rank) {
    std::vector<int>& ranks = readers[{source.storage.file, source.storage.byte_offset}];
    if (ranks.empty() || ranks.back() != rank) ranks.push_back(rank);
}

}  // namespace

StorageReaders storage_readers(const TensorMapping& mapping, const std::vector<std::vector<WriteTask>>& work) {
    StorageReaders readers;
    for (size_t rank = 0; rank < work.size(); ++rank) {
        const int r = static_cast<int>(rank);
        for (const WriteTask& task : work[rank]) {
            const OutputTensor& t = mapping.tensors[task.tensor];
            for (const BoxCopy& c : t.copies)
                if (numel(c.extent) > 0 && feeds_rows(t, c, task)) add_reader(readers, mapping.sources[c.source], r);
            for (const OutputTensor* side : side_inputs(mapping, t))
                for (const BoxCopy& c : side->copies) add_reader(readers, mapping.sources[c.source], r);
        }
    }
    return readers;
}

}  // namespace vmerge
