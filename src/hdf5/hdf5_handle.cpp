#include "hdf5/hdf5_handle.h"

#include "core/error.h"

namespace vmerge {

void quiet_hdf5_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

std::string hdf5_error(const std::string& what) {
    // The stack runs from the API call down to the cause; the last entries say why.
    std::string details;
    H5Ewalk2(
        H5E_DEFAULT, H5E_WALK_DOWNWARD,
        [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
            auto& text = *static_cast<std::string*>(data);
            if (n == 0 || !e->desc || !*e->desc) {
                if (n == 0 && e->desc) text = e->desc;
                return 0;
            }
            text += std::string("; ") + e->desc;
            return 0;
        },
        &details);
    H5Eclear2(H5E_DEFAULT);
    return details.empty() ? what + ": HDF5 call failed" : what + ": " + details;
}

H5Handle checked(hid_t id, H5Handle::Closer close, const std::string& what) {
    if (id < 0) throw Error(hdf5_error(what));
    return H5Handle(id, close);
}

void checked(herr_t rc, const std::string& what) {
    if (rc < 0) throw Error(hdf5_error(what));
}

H5Handle string_type() {
    H5Handle t = checked(H5Tcopy(H5T_C_S1), H5Tclose, "HDF5 string type");
    checked(H5Tset_size(t, H5T_VARIABLE), "HDF5 string type");
    checked(H5Tset_cset(t, H5T_CSET_UTF8), "HDF5 string type");
    return t;
}

}  // namespace vmerge
