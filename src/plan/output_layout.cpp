#include "plan/output_layout.h"

#include <algorithm>

namespace vmerge {

namespace {

OutputFile plan_file(const std::vector<OutputTensor>& tensors, std::string name, std::vector<size_t> members,
                     const FileFormat& format) {
    OutputFile file;
    file.name = std::move(name);
    file.tensors = std::move(members);
    std::stable_sort(file.tensors.begin(), file.tensors.end(), [&](size_t a, size_t b) {
        const size_t ea = element_size(tensors[a].dtype), eb = element_size(tensors[b].dtype);
        if (ea != eb) return ea > eb;
        return tensors[a].name < tensors[b].name;
    });
    std::vector<const OutputTensor*> ordered;
    for (size_t i : file.tensors) ordered.push_back(&tensors[i]);
    file.header = format.header ? format.header(ordered, file.name) : std::string();
    return file;
}

}  // namespace

OutputLayout plan_output_layout(const std::vector<OutputTensor>& tensors, uint64_t max_shard_size,
                                const FileFormat& format) {
    OutputLayout layout;
    std::vector<std::vector<size_t>> groups;
    std::vector<size_t> adapter;
    uint64_t current = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t bytes = tensors[i].nbytes();
        layout.total_size += bytes;
        if (tensors[i].adapter) {
            adapter.push_back(i);
            continue;
        }
        if (groups.empty() || (current > 0 && current + bytes > max_shard_size)) {
            groups.emplace_back();
            current = 0;
        }
        groups.back().push_back(i);
        current += bytes;
    }
    if (groups.empty()) groups.emplace_back();
    for (size_t g = 0; g < groups.size(); ++g) {
        layout.files.push_back(plan_file(tensors, format.model_file_name(g, groups.size()), groups[g], format));
    }
    layout.model_files = layout.files.size();
    if (!adapter.empty()) layout.files.push_back(plan_file(tensors, format.adapter_file, adapter, format));
    layout.locations.resize(tensors.size());
    for (size_t f = 0; f < layout.files.size(); ++f) {
        OutputFile& file = layout.files[f];
        uint64_t offset = file.header.size();
        for (size_t i : file.tensors) {
            layout.locations[i] = {f, offset};
            offset += tensors[i].nbytes();
        }
        file.size = offset;
    }
    return layout;
}

}  // namespace vmerge
