#pragma once
#include <string>

namespace vmerge {

// Names of the files in an output folder, for the outputs that write them and for the inputs
// that hold files to be written into one (an archive's HF files).

// The sidecar `vmerge.checksums.json` that `merge` leaves in the output and `verify` checks.
constexpr const char* kChecksumsFile = "vmerge.checksums.json";

// A weight file (safetensors, torch, TF/Keras .h5, vmerge's model.h5), a weight index or the
// checksum list, by its file name: never copied into an output as an HF file (it would stand
// beside, or in place of, the weights the merge writes).
bool is_weight_file(const std::string& name);

// Error unless `rel` is a plain relative path (no "..", no absolute path); `source` names who gave it.
void check_output_name(const std::string& rel, const std::string& source);

}  // namespace vmerge
