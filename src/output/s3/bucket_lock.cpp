#include "output/s3/bucket_lock.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <iterator>
#include <thread>

#include "core/error.h"
#include "io/s3_client.h"
#include "io/s3_multipart.h"
#include "output/target_guard.h"

namespace vmerge {
namespace {

constexpr uint64_t kMaxLockBytes = 256;
constexpr int kReleaseSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The handler's end of the wake-up pipe, and the signal it saw (0: the lock is released normally).
std::atomic<int> g_wake_fd{-1};
std::atomic<int> g_signal{0};

void wake_releaser(int signal) {
    g_signal = signal;
    const char byte = 1;
    // write(2) only: the one thing a signal handler may do here.
    if (const int fd = g_wake_fd.load(); fd >= 0) [[maybe_unused]] const auto n = ::write(fd, &byte, 1);
}

}  // namespace

// The handlers and the thread that deletes the lock object when a signal ends the process. One
// BucketLock at a time per process (the watcher's): the handler's pipe is process-wide.
class BucketLock::SignalRelease {
public:
    explicit SignalRelease(BucketLock& lock) {
        if (::pipe2(pipe_, O_CLOEXEC) != 0) return;  // no release on a signal; the lock still holds
        g_signal = 0;
        g_wake_fd = pipe_[1];
        thread_ = std::thread([this, &lock] {
            char byte = 0;
            while (::read(pipe_[0], &byte, 1) < 0 && errno == EINTR) {
            }
            const int signal = g_signal.load();
            if (signal == 0) return;  // the destructor: released normally
            lock.release();
            restore();
            std::raise(signal);  // the previous action now: the process ends as it would have
        });
        for (size_t i = 0; i < std::size(kReleaseSignals); ++i) {
            ::sigaction(kReleaseSignals[i], nullptr, &previous_[i]);
            if (previous_[i].sa_handler == SIG_IGN) continue;  // ignored (nohup's SIGHUP): it ends nothing
            struct sigaction action {};
            action.sa_handler = wake_releaser;
            sigemptyset(&action.sa_mask);
            ::sigaction(kReleaseSignals[i], &action, nullptr);
        }
    }
    ~SignalRelease() {
        if (!thread_.joinable()) return;
        restore();
        g_wake_fd = -1;
        const char byte = 0;
        [[maybe_unused]] const auto n = ::write(pipe_[1], &byte, 1);
        thread_.join();
        ::close(pipe_[0]);
        ::close(pipe_[1]);
    }
    SignalRelease(const SignalRelease&) = delete;
    SignalRelease& operator=(const SignalRelease&) = delete;

private:
    void restore() {
        for (size_t i = 0; i < std::size(kReleaseSignals); ++i) ::sigaction(kReleaseSignals[i], &previous_[i], nullptr);
    }
    int pipe_[2] = {-1, -1};
    struct sigaction previous_[std::size(kReleaseSignals)] {};
    std::thread thread_;
};

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
    bool taken = put_object_if_absent(s3_client(), object_, token_);
    const std::string held = taken ? "" : read_holder();
    if (!taken && lock_holder_is_gone(held)) {
        // The holder was killed on this host. Delete its object and take the lock as a new one:
        // a second taker racing here is refused by the conditional write.
        if (read_holder() == held) delete_object(s3_client(), object_);
        taken = put_object_if_absent(s3_client(), object_, token_);
    }
    if (taken) {
        on_signal_ = std::make_unique<SignalRelease>(*this);
        return;
    }
    const std::string holder = read_holder();
    throw Error(what + " (lock " + object_.text() + " held by host and pid " +
                (holder.empty() ? std::string("unknown") : holder.substr(0, holder.find_last_of(' '))) +
                "); wait for it, or delete the lock object if none runs on that host");
}

BucketLock::~BucketLock() {
    on_signal_.reset();
    release();
}

void BucketLock::release() noexcept {
    try {
        if (read_holder() == token_) delete_object(s3_client(), object_);
    } catch (const std::exception&) {
        // The store is unreachable: the object stays, and the next taker on this host takes it over.
    }
}

}  // namespace vmerge
