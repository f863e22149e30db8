#include "io/output_names.h"

#include <filesystem>

#include "core/error.h"

namespace vmerge {

bool is_weight_file(const std::string& name) {
    auto ends_with = [&](const char* suffix) { return name.ends_with(suffix); };
    // .h5: TF/Keras weights (tf_model.h5), and the name of the archive --format hdf5 writes: a
    // copied model.h5 would replace it.
    return ends_with(".safetensors") || ends_with(".bin") || ends_with(".pt") || ends_with(".pth") || ends_with(".h5") ||
           name == "model.safetensors.index.json" || name == "pytorch_model.bin.index.json" || name == kChecksumsFile;
}

void check_output_name(const std::string& rel, const std::string& source) {
    const std::filesystem::path p(rel);
    bool ok = !rel.empty() && p.is_relative();
    for (const auto& part : p) ok = ok && part != ".." && part != "." && !part.empty();
    if (!ok) throw Error(source + ": file name '" + rel + "' is not a plain relative path inside the output folder");
}

}  // namespace vmerge
