#pragma once
#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "command_line.h"
#include "comm.h"
#include "mapping/tensor_mapping.h"

namespace vmerge {

// merge --format hdf5: the mapped checkpoint into <target_dir>/model.h5 (docs/hdf5.md), every
// rank writing its share of the plan through parallel HDF5, plus the HF files beside it
// (`generated`: the files the merge writes itself, such as config.json, replace copied ones).
// `threads`: what a LoRA fold may use (the copy executor's). The mapping is taken over: its
// rows are realigned to the archive's chunks.
int write_hdf5_archive(const Options& o, Comm& comm, TensorMapping mapping, const std::string& hf_dir,
                       const std::map<std::string, std::string>& generated, uint64_t max_memory, int threads, std::ostream& out, std::ostream& err);

// merge --backend hdf5: <local_dir>/model.h5 back into a Hugging Face safetensors folder.
int convert_hdf5_archive(const Options& o, Comm& comm, uint64_t max_memory, std::ostream& out);

// inspect --backend hdf5: the archive's tensors and its compression ratio per dtype.
int inspect_hdf5_archive(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
