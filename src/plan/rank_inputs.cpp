#include "plan/rank_inputs.h"

#include <set>
#include <string_view>

namespace vmerge {

bool feeds_rows(const OutputTensor& t, const BoxCopy& c, const WriteTask& task) {
    if (t.assembled_shape().empty() || c.dst_start.empty()) return true;
    return c.dst_start[0] < task.row_end && c.dst_start[0] + c.extent[0] > task.row_begin;
}

namespace {

// The files of its LoRA factors and source scales (read whole).
void add_side_input_files(const TensorMapping& mapping, const OutputTensor& t, std::set<std::string>& files) {
    for (const OutputTensor* side : side_inputs(mapping, t))
        for (const auto& c : side->copies) files.insert(mapping.sources[c.source].storage.file);
}

}  // namespace

std::set<std::string> input_files_of(const TensorMapping& mapping, const std::vector<WriteTask>& tasks) {
    std::set<std::string> files;
    for (const auto& task : tasks) {
        const OutputTensor& t = mapping.tensors[task.tensor];
        for (const auto& c : t.copies)
            if (feeds_rows(t, c, task)) files.insert(mapping.sources[c.source].storage.file);
        add_side_input_files(mapping, t, files);
    }
    return files;
}

std::set<std::string> input_files_of(const TensorMapping& mapping) {
    std::set<std::string> files;
    auto add = [&](const OutputTensor& t) {
        for (const auto& c : t.copies)
            if (numel(c.extent) > 0 && !mapping.sources[c.source].storage.file.empty())
                files.insert(mapping.sources[c.source].storage.file);
    };
    for (const auto& t : mapping.tensors) add(t);
    for (const OutputTensor* side : all_side_inputs(mapping)) add(*side);
    return files;
}

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
