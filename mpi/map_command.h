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

// `vmerge-mpi inspect --suggest_table --local_dir CKPT --base HF_BASE_DIR [--json] [--out FILE]`:
// map's path, reported as inspect does: the checkpoint's facts, the proposed table and the
// evidence of every rule (with --json one object: the facts, "suggested_table", "rules",
// "refused", "unmapped_base"); --out also writes the table. Exit 1 when a case was refused.
int run_suggest_table(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
