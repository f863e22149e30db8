#include "output/registry.h"

#include "core/error.h"
#ifndef VMERGE_NO_MPI
#include "output/hdf5/hdf5_output.h"
#endif
#include "io/object_url.h"
#include "output/s3/bucket_output.h"
#include "output/safetensors/safetensors_output.h"

namespace vmerge {
namespace {

template <typename Format>
std::unique_ptr<OutputFormat> make(OutputOptions options) {
    return std::make_unique<Format>(std::move(options));
}

#ifdef VMERGE_NO_MPI
// The archive's place in a build without it: the command line refuses it first; this catches a
// caller that skipped the command line.
std::unique_ptr<OutputFormat> make_unavailable_archive(OutputOptions) {
    throw Error(hdf5_archive_unavailable("--format hdf5"));
}
#endif

}  // namespace

const std::vector<OutputFormatInfo>& output_formats() {
    static const std::vector<OutputFormatInfo> formats = {
        {"safetensors", "", make<SafetensorsOutput>},
#ifdef VMERGE_NO_MPI
        {"hdf5", "one model.h5 archive, written with parallel HDF5; docs/hdf5.md", make_unavailable_archive,
#else
        {"hdf5", "one model.h5 archive, written with parallel HDF5; docs/hdf5.md", make<Hdf5Output>,
#endif
         /*compression=*/true, /*quantized=*/true, /*resumable=*/false,
         /*reusable=*/false},
    };
    return formats;
}

const OutputFormatInfo* find_output_format(const std::string& name) {
    for (const auto& f : output_formats())
        if (f.name == name) return &f;
    return nullptr;
}

std::unique_ptr<OutputFormat> make_output_format(const std::string& name, OutputOptions options) {
    const OutputFormatInfo* format = find_output_format(name);
    if (!format) throw Error("--format " + name + ": expected " + output_format_choices());
    if (is_object_url(options.target)) {
        if (name != "safetensors")
            throw Error("--format " + name + ": a merge into a bucket (" + options.target + ") writes safetensors only");
        return std::make_unique<BucketOutput>(std::move(options));
    }
    return format->make(std::move(options));
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

std::string output_formats_with(bool OutputFormatInfo::*capability) {
    std::string names;
    for (const auto& f : output_formats())
        if (f.*capability) names += (names.empty() ? "" : " or ") + f.name;
    return names;
}

std::string hdf5_archive_unavailable(const std::string& what) {
#ifdef VMERGE_NO_MPI
    return what + ": this vmerge-mpi was built without MPI (-DVMERGE_MPI=OFF), and the HDF5 archive is written "
                  "and read with parallel HDF5; rebuild with -DVMERGE_MPI=ON (MPI and libhdf5-openmpi-dev) for it";
#else
    (void)what;
    return "";
#endif
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
