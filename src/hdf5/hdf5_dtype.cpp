#include "hdf5/hdf5_dtype.h"

#include <string>

#include "core/error.h"

namespace vmerge {
namespace {

// A 2-byte float: sign at bit 15, `exponent_bits` at `mantissa_bits`, mantissa at 0.
H5Handle half_float(size_t exponent_bits, size_t mantissa_bits, size_t bias) {
    H5Handle t = checked(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "HDF5 float type");
    checked(H5Tset_fields(t, 15, mantissa_bits, exponent_bits, 0, mantissa_bits), "HDF5 float fields");
    checked(H5Tset_size(t, 2), "HDF5 float size");
    checked(H5Tset_ebias(t, bias), "HDF5 float exponent bias");
    return t;
}

H5Handle copy_of(hid_t type) { return checked(H5Tcopy(type), H5Tclose, "HDF5 type"); }

}  // namespace

H5Handle hdf5_file_type(DType dtype) {
    switch (dtype) {
        case DType::F64: return copy_of(H5T_IEEE_F64LE);
        case DType::F32: return copy_of(H5T_IEEE_F32LE);
        case DType::F16: return half_float(5, 10, 15);
        case DType::BF16: return half_float(8, 7, 127);
        case DType::I64: return copy_of(H5T_STD_I64LE);
        case DType::I32: return copy_of(H5T_STD_I32LE);
        case DType::I16: return copy_of(H5T_STD_I16LE);
        case DType::I8: return copy_of(H5T_STD_I8LE);
        case DType::U8:
        case DType::BOOL: return copy_of(H5T_STD_U8LE);
        case DType::U16: return copy_of(H5T_STD_U16LE);
        case DType::U32: return copy_of(H5T_STD_U32LE);
        case DType::U64: return copy_of(H5T_STD_U64LE);
        case DType::F8_E4M3:
        case DType::F8_E5M2: {
            H5Handle t = checked(H5Tcreate(H5T_OPAQUE, 1), H5Tclose, "HDF5 opaque type");
            checked(H5Tset_tag(t, std::string(torch_name(dtype)).c_str()), "HDF5 opaque tag");
            return t;
        }
        case DType::C64: {
            H5Handle t = checked(H5Tcreate(H5T_COMPOUND, 8), H5Tclose, "HDF5 compound type");
            checked(H5Tinsert(t, "r", 0, H5T_IEEE_F32LE), "HDF5 compound member");
            checked(H5Tinsert(t, "i", 4, H5T_IEEE_F32LE), "HDF5 compound member");
            return t;
        }
    }
    throw Error("internal: no HDF5 type for dtype " + std::string(safetensors_name(dtype)));
}

}  // namespace vmerge
