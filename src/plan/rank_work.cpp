#include "plan/rank_work.h"

#include <algorithm>

#include "core/error.h"

namespace vmerge {

int64_t row_count(const OutputTensor& t) { return t.shape.empty() ? 1 : t.shape[0]; }

uint64_t row_bytes(const OutputTensor& t) {
    const int64_t rows = row_count(t);
    return rows == 0 ? 0 : t.nbytes() / static_cast<uint64_t>(rows);
}

std::vector<std::vector<WriteTask>> plan_rank_work(const std::vector<OutputTensor>& tensors,
                                                   const OutputLayout& layout, int ranks) {
    if (ranks < 1) throw Error("internal: plan for fewer than one rank");
    std::vector<std::vector<WriteTask>> work(ranks);
    const uint64_t share = (layout.total_size + ranks - 1) / ranks;
    int rank = 0;
    uint64_t done = 0;  // bytes assigned to ranks before and including `rank`
    for (const OutputFile& file : layout.files) {
        for (size_t index : file.tensors) {
            const OutputTensor& t = tensors[index];
            if (t.nbytes() == 0 || t.is_derived()) continue;
            const uint64_t bytes_per_row = row_bytes(t);
            int64_t row = 0;
            const int64_t rows = row_count(t);
            while (row < rows) {
                const uint64_t limit = share * static_cast<uint64_t>(rank + 1);
                const uint64_t room = limit > done ? limit - done : 0;
                int64_t take = static_cast<int64_t>(room / bytes_per_row);
                // Move on when less than half a row fits: the next rank is closer to even.
                if (rank + 1 < ranks && room * 2 < bytes_per_row) {
                    ++rank;
                    continue;
                }
                if (rank + 1 == ranks) take = rows - row;
                // Packed zero points: a split inside a group of `row_align` rows would make two
                // ranks write the same word.
                const int64_t align = std::max<int64_t>(1, t.row_align);
                take = std::clamp<int64_t>(take / align * align, align, rows - row);
                work[rank].push_back({index, row, row + take});
                row += take;
                done += static_cast<uint64_t>(take) * bytes_per_row;
            }
        }
    }
    return work;
}

}  // namespace vmerge
