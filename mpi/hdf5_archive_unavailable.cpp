// The HDF5 archive's place in a build without MPI (-DVMERGE_MPI=OFF), which has no HDF5 target:
// --backend hdf5 stays a choice with the same name and help, so that the flags and their
// messages are the same in every build, and asking for the archive says which build has it
// (hdf5_archive_unavailable, src/output/registry.h). The MPI build compiles verify_archive.cpp
// and the HDF5 target's own registration instead.
#include "core/error.h"
#include "formats/registry.h"
#include "output/registry.h"
#include "verify_archive.h"

namespace vmerge {
namespace {

bool register_unavailable_archive() {
    add_backend_choice({"hdf5", "a model.h5 archive: merge it back, inspect it",
                        ": " + hdf5_archive_unavailable("--backend hdf5"), {}, /*auto_detected=*/false});
    return true;
}

}  // namespace

// A folder holding model.h5 is an archive: checking it as safetensors would report every weight
// missing instead of saying why.
int verify_hdf5_archive(const Options& o, Comm&, std::ostream&) {
    throw Error(hdf5_archive_unavailable("verify --target_dir " + o.output.target + " (a model.h5 archive)"));
}

}  // namespace vmerge

// Registered at start-up by every program linking the driver: CMakeLists.txt names this symbol in
// the driver's link options (as the HDF5 target does its own), so the linker keeps this file.
extern "C" {
extern const bool vmerge_unavailable_archive_registered;
const bool vmerge_unavailable_archive_registered = vmerge::register_unavailable_archive();
}
