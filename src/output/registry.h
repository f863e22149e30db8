#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "output/output_format.h"

namespace vmerge {

// One output format a merge can write (--format): its name and what it is, for --help.
struct OutputFormatInfo {
    std::string name;
    std::string help;  // "" when the name says it all
    std::function<std::unique_ptr<OutputFormat>(OutputOptions)> make;
    bool compression = false;  // takes --compress
    bool quantized = true;     // can hold --quantize's packed weights
    bool resumable = true;     // --resume continues its staging folder
    bool reusable = true;      // --reuse takes over an earlier output's unchanged files
};

// Every output format, the default first. Adding a format: src/output/<new>/ and one line in
// registry.cpp (docs/design.md, "Output formats").
const std::vector<OutputFormatInfo>& output_formats();

// The format named `name`, or nullptr.
const OutputFormatInfo* find_output_format(const std::string& name);

// The writer of format `name` for one merge; Error when there is no such format.
std::unique_ptr<OutputFormat> make_output_format(const std::string& name, OutputOptions options);

// "safetensors | hdf5 (one model.h5 archive, ...)": the --format help.
std::string output_format_help();

// "hdf5": the formats for which `capability` holds, for a usage error.
std::string output_formats_with(bool OutputFormatInfo::*capability);

// "safetensors or hdf5": the choices, for the error on an unknown --format.
std::string output_format_choices();

// The HDF5 archive (--format hdf5, --backend hdf5, verify of a model.h5) is written and read with
// parallel HDF5, which a build without MPI (-DVMERGE_MPI=OFF) leaves out; its name and help stay
// listed so that the flags mean the same in every build. "" in a build that has it; otherwise the
// error for `what` (the option or command asking for it), naming the build option.
std::string hdf5_archive_unavailable(const std::string& what);

}  // namespace vmerge
