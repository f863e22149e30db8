#include "output/registry.h"

namespace vmerge {

const std::vector<OutputFormatInfo>& output_formats() {
    static const std::vector<OutputFormatInfo> formats = {
        {"safetensors", ""},                                                          // src/output/safetensors
        {"hdf5", "one model.h5 archive, written with parallel HDF5; docs/hdf5.md"},  // src/output/hdf5
    };
    return formats;
}

const OutputFormatInfo* find_output_format(const std::string& name) {
    for (const auto& f : output_formats())
        if (f.name == name) return &f;
    return nullptr;
}

std::string output_format_help() {
    std::string help;
    for (const auto& f : output_formats()) {
        if (!help.empty()) help += " | ";
        help += f.name;
        if (!f.help.empty()) help += " (" + f.help + ")";
    }
    return help;
}

std::string output_format_choices() {
    const auto& formats = output_formats();
    std::string choices;
    for (size_t i = 0; i < formats.size(); ++i) {
        if (i) choices += i + 1 == formats.size() ? " or " : ", ";
        choices += formats[i].name;
    }
    return choices;
}

}  // namespace vmerge
