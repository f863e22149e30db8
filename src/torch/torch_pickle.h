#pragma once
#include <string>

#include "pickle/pickle.h"
#include "core/tensor_ref.h"
#include "zip/zip_archive.h"

namespace vmerge {

// Scans a torch.save archive at [base, base+length) of `file` (a whole .pt file with length 0,
// or a DCP item): reads its ZIP directory and data.pkl only, never tensor bytes, and returns
// every tensor of the saved (possibly nested under `model`) state dict.
ScannedFile scan_torch_archive(const InputFile& file, uint64_t base, uint64_t length);

// Interprets one pickled value as a tensor (plain, Parameter or DTensor). Storage records are
// resolved against `archive`. Returns false for values that are not tensors.
bool interpret_tensor(const pickle::Value& value, const ZipArchive& archive,
                      const InputFile& file, TensorRef& out, const std::string& where);

// A pickled torch.Size((...)) or a plain tuple/list of non-negative ints, as a Shape; Error
// naming `where` otherwise.
Shape torch_size_of(const pickle::Value& value, const std::string& where);

}  // namespace vmerge
