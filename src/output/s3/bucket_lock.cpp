#include "output/s3/bucket_lock.h"

#include "core/error.h"
#include "io/s3_client.h"
#include "io/s3_multipart.h"
#include "output/target_guard.h"

namespace vmerge {
namespace {

constexpr uint64_t kMaxLockBytes = 256;

}  // namespace

// The lock object's text, "" when there is none (or it is not a lock's size). Listed directly,
// not through the input listings, which are kept for a run and would not see it change.
std::string BucketLock::read_holder() const {
    uint64_t bytes = 0;
    for (const auto& o : s3_client().list(object_.bucket, object_.key, false).objects)
        if (o.key == object_.key) bytes = o.size;
    if (bytes == 0 || bytes > kMaxLockBytes) return "";
    std::string text(bytes, '\0');
    try {
        s3_client().read_range(object_, 0, text.data(), bytes);
    } catch (const Error&) {
        return "";  // released in between
    }
    return text;
}

BucketLock::BucketLock(const ObjectUrl& object, const std::string& what) : object_(object) {
    token_ = lock_holder_token();
    if (put_object_if_absent(s3_client(), object_, token_)) return;
    const std::string held = read_holder();
    if (lock_holder_is_gone(held)) {
        // The holder was killed on this host. Delete its object and take the lock as a new one:
        // a second taker racing here is refused by the conditional write.
        if (read_holder() == held) delete_object(s3_client(), object_);
        if (put_object_if_absent(s3_client(), object_, token_)) return;
    }
    const std::string holder = read_holder();
    throw Error(what + " (lock " + object_.text() + " held by host and pid " +
                (holder.empty() ? std::string("unknown") : holder.substr(0, holder.find_last_of(' '))) +
                "); wait for it, or delete the lock object if none runs on that host");
}

BucketLock::~BucketLock() {
    try {
        if (read_holder() == token_) delete_object(s3_client(), object_);
    } catch (const std::exception&) {
        // The store is unreachable: the object stays, and the next taker on this host takes it over.
    }
}

}  // namespace vmerge
