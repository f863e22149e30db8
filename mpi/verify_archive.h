#pragma once
#include <ostream>

#include "command_line.h"
#include "comm.h"

namespace vmerge {

// verify on a folder holding an HDF5 archive (model.h5): every dataset and chunk checked and
// decoded as --backend hdf5 reads them, and model.h5 checked against vmerge.checksums.json when
// present. A build without MPI has no archive reader (hdf5_archive_unavailable.cpp): Error.
int verify_hdf5_archive(const Options& o, Comm& comm, std::ostream& out);

}  // namespace vmerge
