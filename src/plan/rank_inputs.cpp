#include "plan/rank_inputs.h"

#include <set>
#include <string_view>

namespace vmerge {
namespace {

// A copy feeds rows [begin, end) of its output tensor when its box meets them on dim 0.
bool feeds_rows(const OutputTensor& t, const BoxCopy& c, const WriteTask& task) {
    if (t.assembled_shape().empty() || c.dst_start.empty()) return true;
    return c.dst_start[0] < task.row_end && c.dst_start[0] + c.extent[0] > task.row_begin;
}

}  // namespace

std::vector<size_t> input_files_per_rank(const TensorMapping& mapping, const std::vector<std::vector<WriteTask>>& work) {
    std::vector<size_t> counts;
    counts.reserve(work.size());
    for (const auto& tasks : work) {
        std::set<std::string_view> paths;
        for (const auto& task : tasks) {
            const OutputTensor& t = mapping.tensors[task.tensor];
            for (const auto& c : t.copies)
                if (feeds_rows(t, c, task)) paths.insert(mapping.sources[c.source].storage.file);
        }
        counts.push_back(paths.size());
    }
    return counts;
}

}  // namespace vmerge
