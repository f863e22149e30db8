#pragma once
#include <hdf5.h>

#include <string>
#include <utility>

namespace vmerge {

// An HDF5 identifier closed with its own close function when it goes out of scope.
class H5Handle {
public:
    using Closer = herr_t (*)(hid_t);
    H5Handle() = default;
    H5Handle(hid_t id, Closer close) : id_(id), close_(close) {}
    H5Handle(H5Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), close_(other.close_) {}
    H5Handle& operator=(H5Handle&& other) noexcept {
        if (this != &other) {
            reset();
            id_ = std::exchange(other.id_, H5I_INVALID_HID);
            close_ = other.close_;
        }
        return *this;
    }
    H5Handle(const H5Handle&) = delete;
    H5Handle& operator=(const H5Handle&) = delete;
    ~H5Handle() { reset(); }

    hid_t get() const { return id_; }
    operator hid_t() const { return id_; }
    // Closes now and reports a failure (a file's close is where its last writes happen).
    herr_t close() {
        herr_t rc = 0;
        if (id_ >= 0 && close_) rc = close_(id_);
        id_ = H5I_INVALID_HID;
        return rc;
    }
    void reset() { close(); }

private:
    hid_t id_ = H5I_INVALID_HID;
    Closer close_ = nullptr;
};

// Turns HDF5's automatic error printing off for this process: failures become Errors whose
// message carries HDF5's own explanation (hdf5_error).
void quiet_hdf5_errors();

// "<what>: <HDF5's innermost error descriptions>", for an Error after a failed HDF5 call.
std::string hdf5_error(const std::string& what);

// Returns `id` wrapped, or throws Error(hdf5_error(what)) when it is negative.
H5Handle checked(hid_t id, H5Handle::Closer close, const std::string& what);
void checked(herr_t rc, const std::string& what);

// A variable-length UTF-8 string type (the archive's string attributes).
H5Handle string_type();

}  // namespace vmerge
