// The zstd filter as an HDF5 dynamically loaded plugin: h5py, h5dump and any HDF5 program find
// it through HDF5_PLUGIN_PATH (docs/hdf5.md) and read vmerge's compressed archives.
#include <H5PLextern.h>

#include "hdf5/h5z_zstd_filter.h"

extern "C" {

__attribute__((visibility("default"))) H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }

__attribute__((visibility("default"))) const void* H5PLget_plugin_info(void) { return vmerge::zstd_filter_class(); }

}
