#pragma once
#include <memory>
#include <string>

#include "io/object_url.h"

namespace vmerge {

// A lock held as one object in a bucket, where a folder's lock is a file (target_guard.h's
// TargetLock): created with S3's conditional write (PUT If-None-Match: *), so of two takers one
// gets HTTP 412 and is refused; the object holds the holder's host, pid and start time. A lock
// whose holder ran on this host and is gone is taken over; one from a live holder or another
// host is an Error naming the object and the holder. Released (deleted) by the destructor when it
// still holds this holder's text, and on SIGINT, SIGTERM or SIGHUP (Ctrl-C, scancel, mpirun
// passing it on) before the process ends with that signal: a signal handler can make no request,
// so it wakes a thread of the lock that deletes the object. Only SIGKILL (or a lost node) leaves
// the object behind; the next taker on the same host takes it over.
class BucketLock {
public:
    // `what` names what the lock guards, for the message ("another vmerge watch ...").
    BucketLock(const ObjectUrl& object, const std::string& what);
    ~BucketLock();
    BucketLock(const BucketLock&) = delete;
    BucketLock& operator=(const BucketLock&) = delete;

private:
    std::string read_holder() const;
    void release() noexcept;
    ObjectUrl object_;
    std::string token_;
    class SignalRelease;
    std::unique_ptr<SignalRelease> on_signal_;
};

}  // namespace vmerge
