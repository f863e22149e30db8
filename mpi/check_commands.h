#pragma once
#include <ostream>

#include "command_line.h"
#include "comm.h"

namespace vmerge {

// test: merge without writing and compare with --test_hf_dir (exit code 1 on a difference).
int run_test(const Options& o, Comm& comm, std::ostream& out);

// verify: the safetensors rules, the index and the checksums merge recorded in --target_dir; a
// folder holding an HDF5 archive is checked as one (verify_hdf5_archive).
int run_verify(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
