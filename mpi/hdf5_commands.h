#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "command_line.h"
#include "comm.h"

namespace vmerge {

// merge --backend hdf5: <local_dir>/model.h5 back into a Hugging Face safetensors folder.
// Read through the copy executor and written by the output format, like any merge.
int convert_hdf5_archive(const Options& o, Comm& comm, uint64_t max_memory, std::ostream& out, std::ostream& err);

// inspect --backend hdf5: the archive's tensors and its compression ratio per dtype.
int inspect_hdf5_archive(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
