#pragma once
#include "hdf5/hdf5_handle.h"
#include "core/dtype.h"

namespace vmerge {

// The HDF5 file type a tensor of `dtype` is stored as (docs/hdf5.md): IEEE floats as they are;
// float16 and bfloat16 as 2-byte HDF5 float types with their own bit layout (bf16: sign 15,
// exponent 8 bits at 7, bias 127, mantissa 7 bits), so the stored bytes are the tensor's bytes
// and h5py reads bf16 exactly, widened to float32; integers and bool as little-endian integers;
// float8 as 1-byte opaque (HDF5 floats cannot say "no infinities"); complex64 as h5py's {r, i}
// compound. The `dtype` attribute of each dataset names the safetensors dtype either way.
H5Handle hdf5_file_type(DType dtype);

}  // namespace vmerge
