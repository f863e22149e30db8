#pragma once
#include <string>

#include "io/object_url.h"

namespace vmerge {

// A lock held as one object in a bucket, where a folder's lock is a file (target_guard.h's
// TargetLock): created with S3's conditional write (PUT If-None-Match: *), so of two takers one
// gets HTTP 412 and is refused; the object holds the holder's host, pid and start time. A lock
// whose holder ran on this host and is gone is taken over; one from a live holder or another
// host is an Error naming the object and the holder. Released (deleted) by the destructor when it
// still holds this holder's text. A process killed by a signal leaves the object behind (no
// request can be made from a signal handler): the next taker on the same host takes it over.
class BucketLock {
public:
    // `what` names what the lock guards, for the message ("another vmerge watch ...").
    BucketLock(const ObjectUrl& object, const std::string& what);
    ~BucketLock();
    BucketLock(const BucketLock&) = delete;
    BucketLock& operator=(const BucketLock&) = delete;

private:
    std::string read_holder() const;
    ObjectUrl object_;
    std::string token_;
};

}  // namespace vmerge
