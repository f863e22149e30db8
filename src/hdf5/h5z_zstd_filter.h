#pragma once
#include <H5public.h>
#include <H5Ipublic.h>
#include <H5Zpublic.h>

namespace vmerge {

// The registered Zstandard filter of HDF5 (docs/reference/output-formats.md §4): cd_values[0] is
// the level.
constexpr H5Z_filter_t kZstdFilterId = 32015;

// The filter class, for H5Zregister (vmerge writing) and the plugin entry point (readers).
// Its callback uses malloc/free and no HDF5 call, so the plugin links no libhdf5 and loads
// into any HDF5 (h5py's serial one, h5dump) without tying it to vmerge's parallel build.
const H5Z_class2_t* zstd_filter_class();

}  // namespace vmerge
