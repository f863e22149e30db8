#pragma once
#include <ostream>

#include "command_line.h"
#include "comm.h"

namespace vmerge {

// `vmerge-mpi map --local_dir CKPT --base HF_BASE_DIR [--out table.json]`: learns the checkpoint's
// architecture table from the base model it was trained from (src/learned_map/): scans the
// checkpoint as a merge does, compares sampled rows with the base's safetensors, prints the
// proposal with its evidence and writes the table (to --out, or stdout). The ranks share the
// scan and the comparisons (a layer group each in turn); rank 0 settles, prints and writes.
int run_map(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
