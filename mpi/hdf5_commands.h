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

// verify --target_dir on a folder holding an archive (model.h5 and no safetensors weights).
bool holds_hdf5_archive(const std::string& dir);
// verify on an archive: every dataset and chunk checked and decoded as --backend hdf5 reads
// them, its HF files read, and model.h5 checked against vmerge.checksums.json when present.
int verify_hdf5_archive(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
