#pragma once
#include <string>
#include <vector>

namespace vmerge {

// One output format a merge can write (--format): its name and what it is, for --help.
struct OutputFormatInfo {
    std::string name;
    std::string help;  // "" when the name says it all
};

// Every output format, the default first. Adding a format: src/output/<new>/ and one line in
// registry.cpp (docs/design-outputs.md).
const std::vector<OutputFormatInfo>& output_formats();

// The format named `name`, or nullptr.
const OutputFormatInfo* find_output_format(const std::string& name);

// "safetensors | hdf5 (one model.h5 archive, ...)": the --format help.
std::string output_format_help();

// "safetensors or hdf5": the choices, for the error on an unknown --format.
std::string output_format_choices();

}  // namespace vmerge
