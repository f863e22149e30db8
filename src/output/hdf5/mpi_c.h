#pragma once
// MPI for the HDF5 archive's writer, the one part of src/ that calls MPI: on the communicator it
// receives (OutputOptions::parallel), never a world of its own (tests/structure/check_layering.py).
// The C API only, as HDF5's own headers include it (no C++ bindings to link).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX
#endif
#include <mpi.h>
